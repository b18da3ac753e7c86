"""Robust image-folder reading: missing folders, corrupt files, resizing."""

import os
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
from PIL import Image

from datamodules.folder import UnreadableImagesWarning, list_images, load_images, read_image, require_folder
from nemo_train.errors import UserInputError


def _write_png(path, color, size=(20, 10)):
    Image.fromarray(np.full((size[1], size[0], 3), color, dtype=np.uint8)).save(path)


def test_missing_folder_names_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserInputError, match="nope.*does not exist"):
        require_folder(missing, "CLEVR data folder")
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(UserInputError, match="is not a folder"):
        require_folder(file)
    assert require_folder(tmp_path) == tmp_path


def test_list_images_keeps_image_files_only(tmp_path):
    _write_png(tmp_path / "b.png", (0, 0, 0))
    _write_png(tmp_path / "a.PNG", (0, 0, 0))
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".hidden.png").write_bytes(b"")
    (tmp_path / "sub.png").mkdir()
    assert [p.name for p in list_images(tmp_path)] == ["a.PNG", "b.png"]


def test_corrupt_files_are_skipped_with_one_warning_and_counted(tmp_path):
    _write_png(tmp_path / "0.png", (255, 0, 0))
    (tmp_path / "1.png").write_bytes(b"this is not an image")
    _write_png(tmp_path / "2.png", (0, 0, 255))
    full = tmp_path / "3.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(full)
    truncated = tmp_path / "4.jpg"
    truncated.write_bytes(full.read_bytes()[:200])
    paths = [tmp_path / f for f in ("0.png", "1.png", "2.png", "4.jpg", "missing.png")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_images(paths, size=8)
    ours = [w for w in caught if issubclass(w.category, UnreadableImagesWarning)]
    assert len(ours) == 1 and "skipped 3 unreadable image file(s) of 5" in str(ours[0].message)
    assert loaded.num_skipped == 3
    assert loaded.kept.tolist() == [0, 2]
    assert [p.name for p in loaded.skipped] == ["1.png", "4.jpg", "missing.png"]
    assert loaded.images.shape == (2, 3, 8, 8)
    assert loaded.images.dtype.is_floating_point is False
    assert loaded.images[0, 0].float().mean() == 255 and loaded.images[0, 2].float().mean() == 0
    assert loaded.images[1, 2].float().mean() == 255


def test_no_warning_when_everything_reads(tmp_path):
    _write_png(tmp_path / "0.png", (1, 2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_images([tmp_path / "0.png"], size=4)
    assert loaded.num_skipped == 0 and loaded.images[0, :, 0, 0].tolist() == [1, 2, 3]


def test_resize_modes(tmp_path):
    # A 20x10 image: left half red, right half blue. Centre crop keeps the middle 10x10 square.
    array = np.zeros((10, 20, 3), dtype=np.uint8)
    array[:, :10, 0] = 255
    array[:, 10:, 2] = 255
    Image.fromarray(array).save(tmp_path / "x.png")
    crop = read_image(tmp_path / "x.png", 10, "center_crop")
    assert crop.shape == (10, 10, 3)
    assert crop[:, :5, 0].min() == 255 and crop[:, 5:, 2].min() == 255
    stretch = read_image(tmp_path / "x.png", 4, "stretch")
    assert stretch.shape == (4, 4, 3) and stretch[:, 0, 0].min() > 200 and stretch[:, -1, 2].min() > 200
    with pytest.raises(UserInputError, match="unknown resize mode 'fit'"):
        load_images([tmp_path / "x.png"], 4, resize="fit")
    with pytest.raises(UserInputError, match="image size 0"):
        load_images([tmp_path / "x.png"], 0)
