"""CIFAR-10 or the synthetic fallback: which one, deterministic, and robust to failed downloads."""

import numpy as np
import pytest
import torch

from helpers import data as D


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
    assert "Quick mode (--quick or COURSE_QUICK=1)" in out and "run without them" in out
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
