"""The ImageNet validation folder is read as distributed: synset folders, or flat with its ground-truth file."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.imagenet import ImageNetValDataModule, imagenet_val_files, imagenet_wnids, scan_imagenet_val
from nemo_train.errors import UserInputError

WNIDS = imagenet_wnids()


def _write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((12, 16, 3), value, dtype=np.uint8)).save(path)


def _flat(folder, labels):
    for n, _ in enumerate(labels, start=1):
        _write(folder / f"ILSVRC2012_val_{n:08d}.JPEG", 10 * n)


def test_synset_folders_any_subset(tmp_path):
    _write(tmp_path / WNIDS[5] / "a.JPEG", 0)
    _write(tmp_path / WNIDS[5] / "b.JPEG", 0)
    _write(tmp_path / WNIDS[0] / "c.JPEG", 0)
    paths, labels = imagenet_val_files(tmp_path)
    assert [p.name for p in paths] == ["c.JPEG", "a.JPEG", "b.JPEG"] and labels.tolist() == [0, 5, 5]
    (tmp_path / "extra").mkdir()
    with pytest.raises(UserInputError, match="not ImageNet-1k WordNet ids"):
        imagenet_val_files(tmp_path)


def test_flat_folder_with_kaggle_or_plain_ground_truth(tmp_path):
    val = tmp_path / "val"
    _flat(val, [3, 7])
    with pytest.raises(UserInputError, match="ground-truth file"):
        imagenet_val_files(val)
    (tmp_path / "LOC_val_solution.csv").write_text(
        f"ImageId,PredictionString\nILSVRC2012_val_00000002,{WNIDS[7]} 1 2 3 4\nILSVRC2012_val_00000001,{WNIDS[3]} 5 6 7 8\n"
    )
    paths, labels = imagenet_val_files(val)
    assert [p.name for p in paths] == ["ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG"]
    assert labels.tolist() == [3, 7]
    plain = tmp_path / "labels.txt"
    plain.write_text(f"ILSVRC2012_val_00000001.JPEG 9\nILSVRC2012_val_00000002.JPEG {WNIDS[1]}\n")
    assert imagenet_val_files(val, plain)[1].tolist() == [9, 1]
    plain.write_text("ILSVRC2012_val_00000001.JPEG 9\n")
    with pytest.raises(UserInputError, match="1 image"):
        imagenet_val_files(val, plain)
    assert [p.name for p in scan_imagenet_val(val, plain).unlabelled] == ["ILSVRC2012_val_00000002.JPEG"]


def test_flat_folder_with_the_devkit_ground_truth(tmp_path):
    from scipy.io import savemat

    data = tmp_path / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n1\n")
    val = tmp_path / "val"
    _flat(val, [0, 0])
    with pytest.raises(UserInputError, match="meta.mat"):
        imagenet_val_files(val)
    synsets = np.array(
        [(1, WNIDS[400]), (2, WNIDS[12]), (1001, "n00000000")], dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O")]
    )
    savemat(data / "meta.mat", {"synsets": synsets})
    assert imagenet_val_files(val)[1].tolist() == [12, 400]


def test_datamodule_streams_a_flat_folder_per_class(tmp_path):
    val = tmp_path / "val"
    _flat(val, [0, 0, 0, 1])
    (tmp_path / "labels.txt").write_text(
        "".join(f"ILSVRC2012_val_{n:08d}.JPEG {c}\n" for n, c in enumerate([0, 0, 0, 1], start=1))
    )
    dm = ImageNetValDataModule(str(val), image_size=8, max_per_class=2, ground_truth=str(tmp_path / "labels.txt"))
    dm.setup()
    assert len(dm.test_set) == 3 and sorted(dm.test_set.labels.tolist()) == [0, 0, 1]
    item = dm.test_set[0]
    assert item["image"].shape == (3, 8, 8) and item["image"].dtype == torch.float32
    assert len(dm.train_set) == 0
