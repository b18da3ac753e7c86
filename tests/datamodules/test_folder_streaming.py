"""Folder datasets stream: files are checked once and decoded when an item or a batch is read."""

import os
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

from datamodules.base import AttributeImageDataset
from datamodules.folder import ImageFiles, UnreadableImagesWarning, class_roots, load_images, open_images


def _write(path, seed, size=(30, 20)):
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)


def test_streamed_images_equal_the_in_memory_ones(tmp_path):
    paths = [tmp_path / f"{i}.png" for i in range(5)]
    for i, p in enumerate(paths):
        _write(p, i)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    paths.insert(2, tmp_path / "bad.png")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eager = load_images(paths, 12)
        lazy = open_images(paths, 12)
    assert sum(issubclass(w.category, UnreadableImagesWarning) for w in caught) == 2
    assert isinstance(lazy.images, ImageFiles) and lazy.images.shape == eager.images.shape
    assert lazy.kept.tolist() == eager.kept.tolist() == [0, 1, 3, 4, 5] and lazy.num_skipped == 1
    assert torch.equal(lazy.images.materialize(), eager.images)
    assert torch.equal(lazy.images[3], eager.images[3]) and torch.equal(lazy.images[1:4], eager.images[1:4])
    subset = lazy.images[torch.tensor([4, 0])]
    assert isinstance(subset, ImageFiles) and torch.equal(subset[:], eager.images[[4, 0]])
    assert torch.equal(lazy.images[torch.tensor([True, False, False, False, True])][:], eager.images[[0, 4]])
    assert lazy.images[0, 1].shape == (12, 12)

    labels = torch.arange(5)
    batches = [
        next(iter(DataLoader(AttributeImageDataset(images, labels, labels, {"x": labels}), batch_size=5)))
        for images in (eager.images, lazy.images)
    ]
    assert torch.equal(batches[0]["image"], batches[1]["image"]) and torch.equal(
        batches[0]["label"], batches[1]["label"]
    )


def test_nothing_is_decoded_until_an_item_is_read(tmp_path):
    _write(tmp_path / "a.png", 0)
    files = open_images([tmp_path / "a.png"], 8).images
    _write(tmp_path / "a.png", 1)  # replaced after the check: the item read shows the new content
    assert torch.equal(files[0], load_images([tmp_path / "a.png"], 8).images[0])
    assert not any(isinstance(v, torch.Tensor) for v in vars(files).values())


def test_group_folders_are_read_as_one_level_of_classes(tmp_path):
    for group in ("background", "texture"):
        _write(tmp_path / "d" / group / "cat" / "1.png", 0)
    (tmp_path / "d" / "questions").mkdir()
    assert [p.name for p in class_roots(tmp_path / "d")] == ["background", "texture"]
    _write(tmp_path / "r" / "cat" / "1.png", 0)
    assert class_roots(tmp_path / "r") == [tmp_path / "r"]
