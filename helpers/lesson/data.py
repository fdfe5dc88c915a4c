"""CIFAR-10 for the training lesson, with a deterministic synthetic fallback.

``load_cifar10()`` returns real CIFAR-10 (``torchvision.datasets.CIFAR10(download=True)`` into
``data/``) when it can be had. Offline, after any download error, or in quick mode it returns a
synthetic CIFAR-shaped dataset instead (3x32x32 images, 10 classes, learnable, same every run) and
says so: results on it are never CIFAR-10 results, and :attr:`CourseData.name` tells which one you got.

Both kinds behave alike: ``.data`` holds uint8 images (N, 32, 32, 3), ``.targets`` a list of labels,
and indexing applies the per-image ``transform`` (``ToTensor`` by default), as torchvision's CIFAR10 does.

A room without internet: on a machine that has CIFAR-10 (``python -m helpers data download`` fetches it
into ``data/``), one command packs it into one file to copy to every machine::

    python -m helpers data pack cifar10-pack.tar.gz          # from data/ (--from FOLDER: another one)

Then ``COURSE_DATA=/path/to/cifar10-pack.tar.gz`` makes the course use it: ``load_cifar10()`` unpacks it
into its ``data/`` folder once (kept while intact) and loads it with ``download=False``, so nothing is
downloaded. ``COURSE_DATA`` may also name a folder that holds ``cifar-10-batches-py`` (used in place, a
read-only share will do) or torchvision's own ``cifar-10-python.tar.gz``, which is the same format as the
pack. A path that does not hold CIFAR-10 raises :class:`CourseDataError` saying what to do; the files are
checked against torchvision's checksums, as a download is. Quick mode uses the synthetic data whatever
``COURSE_DATA`` says; without ``COURSE_DATA`` nothing changes (download, else the synthetic fallback).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from helpers.course.config import DATA_ENV, quick_mode
from helpers.course.i18n import tr, tr_lazy

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SYNTHETIC_NAME = tr_lazy("synthetic CIFAR-shaped data (fallback, not CIFAR-10)")
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
    """``"CIFAR-10"`` or ``SYNTHETIC_NAME`` in the course's language: print it beside every result."""
    description: str
    """One line: what the data is and why it was chosen."""

    @property
    def is_cifar10(self) -> bool:
        return self.name == CIFAR10_NAME

    @property
    def english_name(self) -> str:
        """The name in English, whatever the course's language: what a checkpoint records."""
        return CIFAR10_NAME if self.is_cifar10 else SYNTHETIC_NAME

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
    why = tr(" ({reason})", reason=tr(reason)) if reason else ""
    return CourseData(
        train=SyntheticCIFAR(n_train, seed=0, transform=transform),
        test=SyntheticCIFAR(n_test, seed=1, transform=transform),
        name=tr(SYNTHETIC_NAME),
        description=tr(
            "{name}: 3x32x32 images, 10 classes, generated from a fixed seed{why}", name=tr(SYNTHETIC_NAME), why=why
        ),
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


PACK_NAME = "cifar10-pack.tar.gz"
MAKE_A_PACK = (
    f"on a machine with CIFAR-10, `python -m helpers data pack {PACK_NAME}` makes the pack "
    "(`python -m helpers data download` first, where there is internet)"
)


class CourseDataError(RuntimeError):
    """``COURSE_DATA`` names something that is not a usable CIFAR-10: the message says what to do."""


def _cifar10_class():
    import torchvision

    return torchvision.datasets.CIFAR10


def _cifar10_files() -> list[tuple[str, str]]:
    """(file name, md5) of every file torchvision's CIFAR10 reads from ``cifar-10-batches-py``."""
    cls = _cifar10_class()
    return [(name, md5) for name, md5 in [*cls.train_list, *cls.test_list]] + [(cls.meta["filename"], cls.meta["md5"])]


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _intact(folder: Path) -> bool:
    """``folder`` (a ``cifar-10-batches-py``) holds every file torchvision reads, each with its checksum."""
    return all((folder / name).is_file() and _md5(folder / name) == md5 for name, md5 in _cifar10_files())


def _pack_in(folder: Path) -> Path | None:
    for name in (PACK_NAME, _cifar10_class().filename):
        if (folder / name).is_file():
            return folder / name
    return None


def course_data_root(root: str | Path = "data") -> Path | None:
    """The folder to give torchvision's CIFAR10 (``download=False``) when ``COURSE_DATA`` is set, else None.

    A pack (a file) is unpacked into ``root`` first, unless an intact copy is already there.
    """
    value = os.environ.get(DATA_ENV, "").strip()
    if not value:
        return None
    given = Path(value).expanduser()
    where = f"{DATA_ENV}={value}"
    if not given.exists():
        raise CourseDataError(
            f"{where}: no such file or folder. Copy the CIFAR-10 pack there ({MAKE_A_PACK}), "
            f"or unset {DATA_ENV} to download CIFAR-10 (offline: the synthetic fallback)."
        )
    base = _cifar10_class().base_folder
    if given.is_dir():
        if (given / base).is_dir():
            return given
        if given.name == base:
            return given.parent
        pack = _pack_in(given)
        if pack is None:
            raise CourseDataError(
                f"{where}: this folder holds no CIFAR-10 (no {base} folder, no {PACK_NAME} or "
                f"{_cifar10_class().filename}). Point {DATA_ENV} at the pack file, or at the folder that holds {base}; "
                f"{MAKE_A_PACK}."
            )
        given = pack
    return _unpack(given, Path(root), where)


def _unpack(pack: Path, root: Path, where: str) -> Path:
    """Unpack a pack's ``cifar-10-batches-py`` into ``root`` (kept there while intact); returns ``root``."""
    base = _cifar10_class().base_folder
    if (root / base).is_dir() and _intact(root / base):
        return root
    root.mkdir(parents=True, exist_ok=True)
    wanted = {name for name, _ in _cifar10_files()}
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        try:
            with tarfile.open(pack, "r:*") as tar:
                for member in tar:
                    folder, _, name = member.name.lstrip("./").rpartition("/")
                    if member.isfile() and folder == base and name in wanted:
                        source = tar.extractfile(member)
                        (staging / name).write_bytes(source.read() if source else b"")
        except (tarfile.TarError, EOFError, OSError) as err:
            raise CourseDataError(
                f"{where}: not a CIFAR-10 pack ({type(err).__name__}: {err}). Copy the pack again, or point "
                f"{DATA_ENV} at the folder that holds {base}; {MAKE_A_PACK}."
            ) from None
        missing = sorted(wanted - {p.name for p in staging.iterdir()})
        if missing:
            raise CourseDataError(
                f"{where}: this archive has no {base}/{missing[0]}, so it is not a complete CIFAR-10 pack. "
                f"Copy the pack again; {MAKE_A_PACK}."
            )
        target = root / base
        if target.is_dir() and _intact(target):  # another notebook unpacked it meanwhile
            return root
        shutil.rmtree(target, ignore_errors=True)  # a damaged or half-written copy
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _cifar10_from(root: Path, transform, where: str) -> CourseData:
    """torchvision's CIFAR10 from ``root`` without downloading; a damaged copy is a CourseDataError."""
    cls = _cifar10_class()
    try:
        train = cls(root=str(root), train=True, transform=transform, download=False)
        test = cls(root=str(root), train=False, transform=transform, download=False)
    except RuntimeError as err:  # "Dataset not found or corrupted", "Dataset metadata file not found or corrupted"
        raise CourseDataError(
            f"{where}: the CIFAR-10 files in {root / cls.base_folder} fail torchvision's checks ({err}): an "
            f"incomplete or damaged copy. Copy the pack again; {MAKE_A_PACK}."
        ) from None
    return CourseData(
        train=train,
        test=test,
        name=CIFAR10_NAME,
        description=f"{CIFAR10_NAME}: {len(train)} training and {len(test)} test images, 10 classes ({DATA_ENV})",
    )


def load_cifar10(
    root: str | Path = "data", quick: bool | None = None, transform=None, verbose: bool = True
) -> CourseData:
    """Real CIFAR-10 when it can be had, else the synthetic fallback (always in quick mode).

    ``root`` is relative to the working directory (``data/`` is git-ignored). A failed or
    interrupted download is cleaned up, so the next call starts afresh; a ``root`` folder this call
    created and left empty is removed. Ctrl-C during the download cleans up, then re-raises.

    With ``COURSE_DATA`` set (see the module's docstring), CIFAR-10 comes from there and nothing is
    downloaded; a path that does not hold it raises :class:`CourseDataError` (no silent fallback).
    """
    quick = quick_mode() if quick is None else quick
    transform = transform if transform is not None else to_tensor_transform()
    if quick:
        data = synthetic(True, transform, reason=tr_lazy("quick mode"))
        if verbose:
            print(
                tr(
                    "Quick mode (COURSE_QUICK=1): using the {name}; outside quick mode the course trains on CIFAR-10.",
                    name=tr(SYNTHETIC_NAME),
                )
            )
        return data
    given = course_data_root(root)
    if given is not None:
        data = _cifar10_from(given, transform, f"{DATA_ENV}={os.environ[DATA_ENV].strip()}")
        if verbose:
            print(f"{CIFAR10_NAME} from {DATA_ENV} ({os.environ[DATA_ENV].strip()}): nothing downloaded.")
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


def pack(out: str | Path, source: str | Path = "data") -> Path:
    """Pack the CIFAR-10 that ``source`` holds into one file (``cifar-10-batches-py`` in a tar.gz).

    ``source`` is a data folder with torchvision's ``cifar-10-python.tar.gz`` (copied as it is: it is
    already such a file) or an intact ``cifar-10-batches-py`` (packed), or that folder itself. Raises
    :class:`CourseDataError`, saying what to do, when there is none.
    """
    cls = _cifar10_class()
    source, out = Path(source), Path(out)
    if source.name == cls.base_folder:
        source = source.parent
    archive, folder = source / cls.filename, source / cls.base_folder
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        if archive.is_file() and _md5(archive) == cls.tgz_md5:
            shutil.copyfile(archive, partial)
        elif folder.is_dir() and _intact(folder):
            with tarfile.open(partial, "w:gz") as tar:
                for name, _ in _cifar10_files():
                    tar.add(folder / name, arcname=f"{cls.base_folder}/{name}")
        else:
            damaged = folder.is_dir() or archive.is_file()
            raise CourseDataError(
                f"No {'intact ' if damaged else ''}CIFAR-10 download in {source}/ "
                f"(looked for {cls.filename} and the {cls.base_folder} folder"
                f"{', which fail torchvision checksums' if damaged else ''}). "
                f"Where there is internet, run `python -m helpers data download` (it saves CIFAR-10 into data/), "
                f"then this command again; or give --from the folder that holds {cls.base_folder}."
            )
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def download(root: str | Path = "data") -> CourseData:
    """Download CIFAR-10 into ``root`` with torchvision (no fallback: an error says what went wrong)."""
    import torchvision

    cls = torchvision.datasets.CIFAR10
    try:
        train = cls(root=str(root), train=True, download=True)
    except BaseException:
        _remove_partial_download(Path(root))  # no half archive left for pack to trip over
        raise
    test = cls(root=str(root), train=False, download=False)
    return CourseData(train=train, test=test, name=CIFAR10_NAME, description=f"{CIFAR10_NAME} in {root}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers data",
        description="CIFAR-10 for a room without internet: download it once, pack it into one file, copy that "
        f"file to every machine and set {DATA_ENV}=/path/to/{PACK_NAME} there.",
        epilog=f"{DATA_ENV} may name the pack, torchvision's cifar-10-python.tar.gz, or a folder that holds "
        "cifar-10-batches-py (used in place). A pack is unpacked into the course's data/ folder once. Nothing is "
        f"downloaded while {DATA_ENV} is set; a path without CIFAR-10 stops with a message that says what to do. "
        "Quick mode (COURSE_QUICK=1) uses the synthetic data in any case.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser(
        "pack",
        help="pack the CIFAR-10 a data folder holds into one file",
        description=f"Pack the CIFAR-10 downloaded into a data folder (default: data/) into one file; on each "
        f"machine, {DATA_ENV}=/path/to/that/file makes the course use it without downloading.",
    )
    packing.add_argument("out", type=Path, help=f"the file to write, e.g. {PACK_NAME}")
    packing.add_argument(
        "--from", dest="source", type=Path, default=Path("data"), help="the folder holding the download (default: data)"
    )
    fetching = commands.add_parser("download", help="download CIFAR-10 (about 170 MB) into a data folder")
    fetching.add_argument("--root", type=Path, default=Path("data"), help="where to save it (default: data)")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            out = pack(args.out, args.source)
            print(
                f"Packed CIFAR-10 into {out} ({out.stat().st_size / 1e6:.0f} MB). Copy it to each machine and set "
                f"{DATA_ENV}={out.resolve()} there (its path on that machine): the course then loads CIFAR-10 from "
                "it and downloads nothing."
            )
        else:
            data = download(args.root)
            print(f"{data}, in {args.root}/. Next: python -m helpers data pack {PACK_NAME} --from {args.root}")
    except CourseDataError as err:
        print(err, file=sys.stderr)
        return 1
    except Exception as err:  # a failed download: offline, a proxy, a full disk
        print(f"CIFAR-10 could not be downloaded ({type(err).__name__}: {err}). Run this where there is internet.",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
