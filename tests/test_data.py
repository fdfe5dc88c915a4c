"""CIFAR-10 or the synthetic fallback: which one, deterministic, and robust to failed downloads."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.lesson import data as D


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(D, "SYNTHETIC_QUICK_SIZES", (64, 32))
    monkeypatch.setattr(D, "SYNTHETIC_SIZES", (96, 48))


def fail_download(archive_bytes=b"partial"):
    """A download that writes part of the archive, then loses the connection."""

    def download_and_extract_archive(url, download_root, filename=None, md5=None, **kw):
        from pathlib import Path

        Path(download_root).mkdir(parents=True, exist_ok=True)
        (Path(download_root) / filename).write_bytes(archive_bytes)
        raise ConnectionResetError("connection reset by peer")

    return download_and_extract_archive


def test_quick_mode_uses_the_synthetic_data_and_says_so(tiny, tmp_path, capsys):
    data = D.load_cifar10(tmp_path, quick=True)
    assert not data.is_cifar10 and data.name == D.SYNTHETIC_NAME
    assert "not CIFAR-10" in data.name and "not CIFAR-10" in str(data)
    assert (len(data.train), len(data.test)) == (64, 32)
    img, label = data.train[0]
    assert img.shape == (3, 32, 32) and img.dtype == torch.float32 and 0 <= img.min() and img.max() <= 1
    assert 0 <= label < 10
    out = capsys.readouterr().out
    assert "Quick mode (COURSE_QUICK=1)" in out and "outside quick mode" in out
    assert not any(tmp_path.iterdir())  # quick mode never downloads


def test_synthetic_data_is_deterministic_and_balanced():
    a, b = D.SyntheticCIFAR(200, seed=0), D.SyntheticCIFAR(200, seed=0)
    assert np.array_equal(a.data, b.data) and a.targets == b.targets
    assert not np.array_equal(a.data, D.SyntheticCIFAR(200, seed=1).data)
    assert a.data.shape == (200, 32, 32, 3) and a.data.dtype == np.uint8
    assert np.bincount(a.targets).tolist() == [20] * 10


def test_as_tensors_equals_per_image_to_tensor():
    ds = D.SyntheticCIFAR(16, seed=0, transform=D.to_tensor_transform())
    images, labels = D.as_tensors(ds)
    assert images.is_contiguous() and images.shape == (16, 3, 32, 32) and labels.dtype == torch.long
    assert torch.equal(images[3], ds[3][0]) and labels[3].item() == ds[3][1]


def test_offline_falls_back_cleanly_and_twice(tiny, tmp_path, monkeypatch, capsys):
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "download_and_extract_archive", fail_download())
    for _ in range(2):  # the second run must not trip over what the first left
        data = D.load_cifar10(tmp_path, quick=False)
        assert not data.is_cifar10 and len(data.train) == 96
        out = capsys.readouterr().out
        assert out.startswith("CIFAR-10 could not be downloaded (ConnectionResetError: connection reset by peer)")
        assert "using the synthetic fallback; run online to get the real data" in out
        assert out.count("\n") == 1  # one line
        assert not (tmp_path / "cifar-10-python.tar.gz").exists()  # the partial archive is gone


def test_stale_partial_download_is_removed(tiny, tmp_path, monkeypatch, capsys):
    import torchvision.datasets.cifar as cifar

    # what a killed earlier run leaves: half an archive and a half-extracted folder
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"half")
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"half")
    monkeypatch.setattr(cifar, "download_and_extract_archive", fail_download())
    data = D.load_cifar10(tmp_path, quick=False)
    assert data.name == D.SYNTHETIC_NAME
    assert not (tmp_path / "cifar-10-python.tar.gz").exists()
    assert not (tmp_path / "cifar-10-batches-py").exists()


def test_real_data_path_when_torchvision_succeeds(tiny, tmp_path, monkeypatch):
    import torchvision

    class FakeCIFAR10(D.SyntheticCIFAR):
        def __init__(self, root, train, transform, download):
            assert download is True
            super().__init__(50 if train else 10, seed=int(train), transform=transform)

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    data = D.load_cifar10(tmp_path, quick=False)
    assert data.is_cifar10 and data.name == "CIFAR-10" and (len(data.train), len(data.test)) == (50, 10)


def test_offline_run_leaves_no_empty_data_folder(tiny, tmp_path, monkeypatch, capsys):
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "download_and_extract_archive", fail_download())
    root = tmp_path / "data"
    D.load_cifar10(root, quick=False)
    assert not root.exists()  # created by the failed download, empty: removed
    root.mkdir()
    (root / "mine.txt").write_text("kept")
    D.load_cifar10(root, quick=False)
    assert (root / "mine.txt").exists()  # a folder that was there stays


def test_ctrl_c_during_download_cleans_up_and_re_raises(tiny, tmp_path, monkeypatch):
    import torchvision.datasets.cifar as cifar

    def ctrl_c(url, download_root, filename=None, md5=None, **kw):
        with pytest.raises(ConnectionResetError):  # writes part of the archive
            fail_download()(url, download_root, filename, md5)
        raise KeyboardInterrupt

    monkeypatch.setattr(cifar, "download_and_extract_archive", ctrl_c)
    root = tmp_path / "data"
    with pytest.raises(KeyboardInterrupt):
        D.load_cifar10(root, quick=False)
    assert not root.exists()  # the partial archive and the folder are gone


def test_head_takes_the_first_images_and_says_so(tiny):
    data = D.synthetic(False)  # 96 training, 48 test images
    assert data.head(None, None) is data and data.head(500, 500) is data  # nothing to cut
    small = data.head(40, 10)
    assert (len(small.train), len(small.test)) == (40, 10) and small.name == data.name
    assert "using the first 40 of 96 training and 10 of 48 test images" in small.description
    image, label = small.train[3]
    assert torch.equal(image, data.train[3][0]) and label == data.train[3][1]
    assert len(data.head(40, None).test) == 48
    with pytest.raises(ValueError, match="at least one image"):
        data.head(0, None)


# ---- A room without internet: the CIFAR-10 pack and COURSE_DATA ----------------------------------------------

BASE = "cifar-10-batches-py"
BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def fake_cifar10(root, images_per_batch=2):
    """torchvision's CIFAR-10 layout with a few images per batch: ``root/cifar-10-batches-py``, pickles as the
    real ones (``data``: uint8 (N, 3072), ``labels``; ``batches.meta``: ``label_names``). Returns the folder."""
    import pickle

    folder = root / BASE
    folder.mkdir(parents=True)
    for i, name in enumerate(BATCHES):
        data = np.full((images_per_batch, 3 * 32 * 32), 10 * i, dtype=np.uint8)
        data[:, 0] = np.arange(images_per_batch)  # each image its own first pixel
        labels = [(i + k) % 10 for k in range(images_per_batch)]
        (folder / name).write_bytes(pickle.dumps({"batch_label": name, "data": data, "labels": labels}))
    meta = {"label_names": list(D.CIFAR10_CLASSES), "num_cases_per_batch": images_per_batch}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return folder


def md5(path):
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_checksums(monkeypatch, tmp_path):
    """Build a fake CIFAR-10 in ``tmp_path/made`` and make torchvision's CIFAR10 expect its checksums, as it expects
    the real files' (it checks every batch and the meta file on load, and the archive before using it)."""
    import tarfile

    import torchvision

    folder = fake_cifar10(tmp_path / "made")
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "train_list", [[n, md5(folder / n)] for n in BATCHES[:5]])
    monkeypatch.setattr(cls, "test_list", [["test_batch", md5(folder / "test_batch")]])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": md5(folder / "batches.meta")})
    archive = tmp_path / "made" / cls.filename  # what torchvision downloads: the folder in a tar.gz
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=BASE)
    monkeypatch.setattr(cls, "tgz_md5", md5(archive))
    return folder


@pytest.fixture
def no_network(monkeypatch):
    """Any download or connection fails the test."""
    import socket

    import torchvision.datasets.cifar as cifar

    def refuse(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(cifar, "download_and_extract_archive", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def pack_members(path):
    import tarfile

    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_pack_packs_an_extracted_download(fake_checksums, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(fake_checksums, data / BASE)
    assert D.main(["pack", str(tmp_path / "cifar10-pack.tar.gz"), "--from", str(data)]) == 0
    members = pack_members(tmp_path / "cifar10-pack.tar.gz")
    assert members == {f"{BASE}/{p.name}": p.read_bytes() for p in fake_checksums.iterdir()}
    out = capsys.readouterr().out
    assert out.startswith(f"Packed CIFAR-10 into {tmp_path / 'cifar10-pack.tar.gz'}")
    assert "set COURSE_DATA=" in out and "downloads nothing" in out


def test_pack_copies_torchvisions_archive_as_it_is(fake_checksums, tmp_path):
    archive = fake_checksums.parent / "cifar-10-python.tar.gz"
    out = D.pack(tmp_path / "out" / "pack.tar.gz", fake_checksums.parent)  # the archive wins over the folder
    assert out.read_bytes() == archive.read_bytes()
    assert D.pack(tmp_path / "again.tar.gz", fake_checksums).exists()  # the cifar-10-batches-py folder itself


def test_pack_without_a_download_says_what_to_do(fake_checksums, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert D.main(["pack", str(tmp_path / "p.tar.gz"), "--from", str(empty)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"No CIFAR-10 download in {empty}/ (looked for cifar-10-python.tar.gz and the {BASE} folder)")
    assert "python -m helpers data download" in err and "--from" in err
    broken = tmp_path / "broken"
    shutil.copytree(fake_checksums, broken / BASE)
    (broken / BASE / "data_batch_3").write_bytes(b"half")
    assert D.main(["pack", str(tmp_path / "p.tar.gz"), "--from", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "No intact CIFAR-10 download" in err and "fail torchvision checksums" in err
    assert not list(tmp_path.glob("p.tar.gz*"))  # nothing half-written is left


def test_course_data_pack_is_loaded_by_torchvision_without_the_network(
    fake_checksums, no_network, tmp_path, monkeypatch, capsys
):
    D.pack(tmp_path / "cifar10-pack.tar.gz", fake_checksums.parent)
    monkeypatch.setenv("COURSE_DATA", str(tmp_path / "cifar10-pack.tar.gz"))
    root = tmp_path / "lab" / "data"
    data = D.load_cifar10(root, quick=False)
    assert data.is_cifar10 and (len(data.train), len(data.test)) == (10, 2)
    assert data.train.classes == list(D.CIFAR10_CLASSES)
    image, label = data.test[1]  # the test batch: value 50, first pixel 1, label (5 + 1) % 10
    assert image.shape == (3, 32, 32) and label == 6 and round(image[0, 0, 0].item() * 255) == 1
    assert round(image[1, 0, 0].item() * 255) == 50
    assert sorted(p.name for p in (root / BASE).iterdir()) == sorted(p.name for p in fake_checksums.iterdir())
    assert capsys.readouterr().out.startswith("CIFAR-10 from COURSE_DATA (")
    stamp = (root / BASE / "data_batch_1").stat().st_mtime_ns
    assert D.load_cifar10(root, quick=False, verbose=False).is_cifar10  # unpacked once, kept while intact
    assert (root / BASE / "data_batch_1").stat().st_mtime_ns == stamp
    (root / BASE / "test_batch").write_bytes(b"damaged")
    assert len(D.load_cifar10(root, quick=False, verbose=False).test) == 2  # a damaged copy is unpacked again


def test_course_data_folder_is_used_in_place(fake_checksums, no_network, tmp_path, monkeypatch):
    for value in (fake_checksums.parent, fake_checksums):  # the folder holding cifar-10-batches-py, or it
        monkeypatch.setenv("COURSE_DATA", str(value))
        data = D.load_cifar10(tmp_path / "data", quick=False, verbose=False)
        assert data.is_cifar10 and len(data.train) == 10 and "(COURSE_DATA)" in data.description
        assert not (tmp_path / "data").exists()  # nothing copied
    only_archive = tmp_path / "share"
    only_archive.mkdir()
    shutil.copy(fake_checksums.parent / "cifar-10-python.tar.gz", only_archive)
    monkeypatch.setenv("COURSE_DATA", str(only_archive))  # a folder with torchvision's archive: unpacked
    assert len(D.load_cifar10(tmp_path / "data", quick=False, verbose=False).test) == 2


def test_course_data_that_holds_no_cifar10_says_what_to_do(fake_checksums, no_network, tmp_path, monkeypatch):
    def error(value):
        monkeypatch.setenv("COURSE_DATA", str(value))
        with pytest.raises(D.CourseDataError) as info:
            D.load_cifar10(tmp_path / "data", quick=False)
        return str(info.value)

    missing = error(tmp_path / "nowhere.tar.gz")
    assert missing.startswith(f"COURSE_DATA={tmp_path / 'nowhere.tar.gz'}: no such file or folder.")
    assert "python -m helpers data pack cifar10-pack.tar.gz" in missing and "unset COURSE_DATA" in missing
    (tmp_path / "empty").mkdir()
    assert "this folder holds no CIFAR-10" in error(tmp_path / "empty")
    (tmp_path / "notes.tar.gz").write_text("not an archive")
    assert ": not a CIFAR-10 pack (ReadError" in error(tmp_path / "notes.tar.gz")
    damaged = tmp_path / "damaged"
    shutil.copytree(fake_checksums, damaged / BASE)
    (damaged / BASE / "batches.meta").write_bytes(b"x")
    assert "fail torchvision's checks" in error(damaged) and "Copy the pack again" in error(damaged)
    monkeypatch.setenv("COURSE_DATA", str(tmp_path / "nowhere"))
    assert D.load_cifar10(tmp_path / "data", quick=True, verbose=False).name == D.SYNTHETIC_NAME  # quick: ignored


def test_download_command_saves_cifar10_and_says_what_next(fake_checksums, tmp_path, monkeypatch, capsys):
    import torchvision.datasets.cifar as cifar

    def download_and_extract_archive(url, download_root, filename=None, md5=None, **kw):
        shutil.copytree(fake_checksums, Path(download_root) / BASE)

    monkeypatch.setattr(cifar, "download_and_extract_archive", download_and_extract_archive)
    assert D.main(["download", "--root", str(tmp_path / "data")]) == 0
    assert "Next: python -m helpers data pack cifar10-pack.tar.gz" in capsys.readouterr().out
    monkeypatch.setattr(cifar, "download_and_extract_archive", fail_download())
    assert D.main(["download", "--root", str(tmp_path / "other")]) == 1
    assert "Run this where there is internet" in capsys.readouterr().err
    assert not (tmp_path / "other" / "cifar-10-python.tar.gz").exists()  # the partial archive is gone
