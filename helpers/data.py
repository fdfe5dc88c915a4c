"""CIFAR-10 for the training lesson, with a deterministic synthetic fallback.

``load_cifar10()`` returns real CIFAR-10 (``torchvision.datasets.CIFAR10(download=True)`` into
``data/``) when it can be had. Offline, after any download error, or in quick mode it returns a
synthetic CIFAR-shaped dataset instead (3x32x32 images, 10 classes, learnable, same every run) and
says so: results on it are never CIFAR-10 results, and :attr:`CourseData.name` tells which one you got.

Both kinds behave alike: ``.data`` holds uint8 images (N, 32, 32, 3), ``.targets`` a list of labels,
and indexing applies the per-image ``transform`` (``ToTensor`` by default), as torchvision's CIFAR10 does.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from helpers.config import quick_mode

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SYNTHETIC_NAME = "synthetic CIFAR-shaped data (fallback, not CIFAR-10)"
CIFAR10_NAME = "CIFAR-10"

# Sizes of the synthetic fallback: (train, test).
SYNTHETIC_SIZES = (10_000, 2_000)
SYNTHETIC_QUICK_SIZES = (2_048, 512)
TEMPLATE_STRENGTH = 0.45


@dataclass
class CourseData:
    """The datasets the course trains on, and which data they are."""

    train: Dataset
    test: Dataset
    name: str
    """``"CIFAR-10"`` or ``SYNTHETIC_NAME``: print it beside every result."""
    description: str
    """One line: what the data is and why it was chosen."""

    @property
    def is_cifar10(self) -> bool:
        return self.name == CIFAR10_NAME

    def __str__(self) -> str:
        return f"{self.name}: {len(self.train)} training and {len(self.test)} test images"

    def head(self, train_images: int | None, test_images: int | None) -> CourseData:
        """The first ``train_images`` training and ``test_images`` test images (None: all of them).

        Returns ``self`` when nothing is cut; otherwise ``Subset`` views, and the description says
        how many of how many images are used. Same data, same name: a result on the first 10,000
        CIFAR-10 images is still a CIFAR-10 result, on fewer images.
        """
        train = _first(self.train, train_images)
        test = _first(self.test, test_images)
        if train is self.train and test is self.test:
            return self
        used = (
            f"using the first {len(train):,} of {len(self.train):,} training "
            f"and {len(test):,} of {len(self.test):,} test images"
        )
        return CourseData(train=train, test=test, name=self.name, description=f"{self.description}; {used}")


def _first(dataset: Dataset, n: int | None) -> Dataset:
    if n is None or n >= len(dataset):
        return dataset
    if n < 1:
        raise ValueError(f"at least one image is needed, not {n}")
    return Subset(dataset, range(n))


class SyntheticCIFAR(Dataset):
    """CIFAR-shaped images a model can learn: one colour-and-stripe template per class, plus noise.

    Deterministic: the same ``seed`` gives the same images. Mimics torchvision's CIFAR10
    (``data``, ``targets``, ``classes``, per-image ``transform``).
    """

    def __init__(self, size: int, seed: int, transform=None, noise: float = 0.3):
        templates = _class_templates()
        gen = torch.Generator().manual_seed(seed)
        targets = torch.arange(size) % 10
        targets = targets[torch.randperm(size, generator=gen)]
        strength = 0.6 + 0.4 * torch.rand(size, 1, 1, 1, generator=gen)
        shift = torch.randint(0, 8, (size,), generator=gen)
        images = torch.empty(size, 3, 32, 32)
        for start in range(0, size, 1024):  # bounded memory, same result
            idx = slice(start, start + 1024)
            base = templates[targets[idx]]
            # roll each image's template by a random amount, so a pixel alone does not give the class
            rolled = torch.stack([b.roll(int(s), dims=2) for b, s in zip(base, shift[idx], strict=True)])
            noise_part = noise * torch.randn(rolled.shape, generator=gen)
            images[idx] = 0.5 + strength[idx] * rolled + noise_part
        self.data = (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
        self.targets = targets.tolist()
        self.classes = list(CIFAR10_CLASSES)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        img, target = self.data[index], self.targets[index]
        if self.transform is not None:
            from PIL import Image

            img = self.transform(Image.fromarray(img))
        return img, target


def _class_templates() -> torch.Tensor:
    """(10, 3, 32, 32) templates in [-0.3, 0.3]: a colour cast times stripes of a class's own direction/frequency."""
    gen = torch.Generator().manual_seed(1234)
    colours = torch.rand(10, 3, generator=gen) - 0.5
    y, x = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    templates = []
    for c in range(10):
        angle = torch.pi * c / 10
        freq = 2 * torch.pi * (2 + c % 3) / 32
        stripes = torch.cos(freq * (x * np.cos(angle) + y * np.sin(angle)))
        templates.append(TEMPLATE_STRENGTH * (colours[c].view(3, 1, 1) + 0.5 * stripes))
    return torch.stack(templates).clamp(-TEMPLATE_STRENGTH, TEMPLATE_STRENGTH)


def to_tensor_transform():
    """The original course's per-image transform: ``torchvision.transforms.ToTensor()``."""
    import torchvision

    return torchvision.transforms.ToTensor()


def synthetic(quick: bool | None = None, transform=None, reason: str = "") -> CourseData:
    """The synthetic fallback (small in quick mode)."""
    quick = quick_mode() if quick is None else quick
    n_train, n_test = SYNTHETIC_QUICK_SIZES if quick else SYNTHETIC_SIZES
    transform = transform if transform is not None else to_tensor_transform()
    why = f" ({reason})" if reason else ""
    return CourseData(
        train=SyntheticCIFAR(n_train, seed=0, transform=transform),
        test=SyntheticCIFAR(n_test, seed=1, transform=transform),
        name=SYNTHETIC_NAME,
        description=f"{SYNTHETIC_NAME}: 3x32x32 images, 10 classes, generated from a fixed seed{why}",
    )


def _remove_partial_download(root: Path) -> None:
    """Delete what a failed download left: an archive that fails its checksum, a half-extracted folder.

    Intact files are kept. (torchvision would also redo both next time; this just leaves no
    half-written 100+ MB file behind.)
    """
    import torchvision
    from torchvision.datasets.utils import check_integrity

    cls = torchvision.datasets.CIFAR10
    archive = root / cls.filename
    if archive.exists() and not check_integrity(str(archive), cls.tgz_md5):
        archive.unlink()
    folder = root / cls.base_folder
    expected = [*cls.train_list, *cls.test_list, [cls.meta["filename"], cls.meta["md5"]]]
    if folder.exists() and not all(check_integrity(str(folder / name), md5) for name, md5 in expected):
        shutil.rmtree(folder, ignore_errors=True)


def _real_cifar10(root: Path, transform) -> CourseData:
    import torchvision

    train = torchvision.datasets.CIFAR10(root=str(root), train=True, transform=transform, download=True)
    test = torchvision.datasets.CIFAR10(root=str(root), train=False, transform=transform, download=True)
    return CourseData(
        train=train,
        test=test,
        name=CIFAR10_NAME,
        description=f"{CIFAR10_NAME}: {len(train)} training and {len(test)} test images, 10 classes",
    )


def load_cifar10(
    root: str | Path = "data", quick: bool | None = None, transform=None, verbose: bool = True
) -> CourseData:
    """Real CIFAR-10 when it can be had, else the synthetic fallback (always in quick mode).

    ``root`` is relative to the working directory (``data/`` is git-ignored). A failed or
    interrupted download is cleaned up, so the next call starts afresh; a ``root`` folder this call
    created and left empty is removed. Ctrl-C during the download cleans up, then re-raises.
    """
    quick = quick_mode() if quick is None else quick
    transform = transform if transform is not None else to_tensor_transform()
    if quick:
        data = synthetic(True, transform, reason="quick mode")
        if verbose:
            print(
                f"Quick mode (--quick or COURSE_QUICK=1): using the {SYNTHETIC_NAME}; "
                "run without them to train on CIFAR-10."
            )
        return data
    root = Path(root)
    created = not root.exists()
    try:
        return _real_cifar10(root, transform)
    except BaseException as err:  # offline, interrupted, corrupt: all fall back the same way
        try:
            _remove_partial_download(root)
            if created and root.is_dir() and not any(root.iterdir()):
                root.rmdir()
        except OSError:
            pass
        if not isinstance(err, Exception):  # Ctrl-C (KeyboardInterrupt), SystemExit: cleaned up, passed on
            raise
        reason = f"{type(err).__name__}: {err}".replace("\n", " ")
        if len(reason) > 120:
            reason = reason[:117] + "..."
        if verbose:
            print(
                f"CIFAR-10 could not be downloaded ({reason}): using the synthetic fallback; "
                "run online to get the real data."
            )
        return synthetic(False, transform, reason="CIFAR-10 could not be downloaded")


def as_tensors(dataset: Dataset, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The whole dataset as one float tensor (N, 3, 32, 32) in [0, 1] and one label tensor, on ``device``.

    Same values as ``ToTensor()`` per image, computed in one go from ``dataset.data``.
    """
    images = torch.from_numpy(np.asarray(dataset.data)).permute(0, 3, 1, 2).contiguous().float().div_(255)
    labels = torch.as_tensor(dataset.targets, dtype=torch.long)
    return images.to(device), labels.to(device)
