"""``nemo-train prepare`` lists what a data folder lacks, one line per problem; exit 2 when anything is missing."""

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
from PIL import Image

from datamodules.imagenet import imagenet_wnids
from datamodules.mappings import objectnet_folders, read_mapping, shipped_mapping
from datamodules.prepare import check_data, imagenet_r_wnids
from nemo_train.cli import main


def _write(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(path)


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", *args])
    return exit_info.value.code, capsys.readouterr()


def test_missing_folder_and_exit_status(tmp_path, capsys):
    code, out = _run(capsys, "--dataset", "objectnet", "--root", str(tmp_path / "nope"))
    assert code == 2 and f"missing: data folder {str(tmp_path / 'nope')!r} does not exist" in out.out
    assert out.err.count("\n") == 1 and "not ready: 1 problem(s)" in out.err


def test_objectnet_counts_and_missing_classes(tmp_path):
    folders = sorted(objectnet_folders())
    for name in folders[:-2]:
        _write(tmp_path / name / "1.png")
    problems, summary = check_data("objectnet", tmp_path)
    assert summary == "ObjectNet: 311 images in 311 class folders"
    assert problems == [
        f"missing class folder(s) under {str(tmp_path)!r}: {folders[-2]}, {folders[-1]}",
        "found 311 images in 311 class folders; expected 50,000 in 313",
    ]


def test_imagenet_r_ready_is_exit_zero(tmp_path, monkeypatch, capsys):
    wnids = imagenet_r_wnids()
    assert len(wnids) == 200
    for w in wnids:
        _write(tmp_path / w / "1.png")
    monkeypatch.setattr("datamodules.prepare.PUBLISHED", {"imagenet_r": (200, 200)})
    assert main(["prepare", "--dataset", "imagenet_r", "--root", str(tmp_path)]) is None
    assert "ready: imagenet_r" in capsys.readouterr().out


def test_imagenet_d_nuisance_folders(tmp_path):
    classes = [c.folder for c in read_mapping(shipped_mapping("imagenet_d"))]
    for c in classes[1:]:
        _write(tmp_path / "background" / c / "1.png")
    _write(tmp_path / "texture" / "unicorn" / "1.png")
    problems, summary = check_data("imagenet_d", tmp_path)
    assert problems == [
        "class folder(s) that are no ImageNet-D class: unicorn",
        f"ImageNet-D class(es) without a folder in any nuisance folder: {classes[0]}",
    ]
    assert summary == "ImageNet-D (background, texture): 113 images in 113 class folders"
    assert check_data("imagenet_d", tmp_path / "background")[0] == [
        f"ImageNet-D class(es) without a folder in any nuisance folder: {classes[0]}"
    ]


def test_imagenet_val_reference_for_a_benchmark(tmp_path):
    wnids = imagenet_wnids()
    needed = sorted({i for c in read_mapping(shipped_mapping("objectnet")) for i in c.imagenet_ids})
    for i in needed[1:]:
        for k in range(50):
            _write(tmp_path / wnids[i] / f"{k}.png")
    for k in range(3):
        _write(tmp_path / wnids[needed[0] + 1 if needed[0] + 1 not in needed else 0] / f"{k}.png")
    problems, summary = check_data("imagenet_val", tmp_path, reference_for="objectnet")
    assert problems == [
        f"no images of 1 of the 125 classes needed: {wnids[needed[0]]}",
        "found 6,200 validation images of the 125 classes needed; expected 6,250",
    ]
    assert summary == "ImageNet validation (synset layout): 6,200 images of the 125 classes needed"


def test_flat_imagenet_val_without_ground_truth(tmp_path):
    _write(tmp_path / "val" / "ILSVRC2012_val_00000001.JPEG")
    problems, _ = check_data("imagenet_val", tmp_path / "val")
    assert len(problems) == 2 and problems[0].startswith(
        "no WordNet-id class folders (n01440764/...) and no ground-truth"
    )
    assert problems[1] == "found 0 validation images of the 1000 classes needed; expected 50,000"


def test_nico_lists_every_missing_cell(tmp_path):
    from datamodules.nico_render import CLASSES, CONTEXTS

    for context in CONTEXTS[1:]:
        for name in CLASSES:
            _write(tmp_path / context / name / "1.png")
    (tmp_path / "outdoor" / "birds" / "1.png").unlink()
    problems, summary = check_data("nico", tmp_path)
    assert problems[0].startswith("missing context folder 'dim_lighting' (accepted names: dim_lighting, dim")
    assert problems[1] == f"no images in {str(tmp_path / 'outdoor' / 'birds')!r}" and len(problems) == 2
    assert summary == "NICO++: 29 images in the 6 x 6 class/context cells"


def test_clevr_missing_images_and_attributes(tmp_path):
    problems, _ = check_data("clevr", tmp_path)
    assert len(problems) == 1 and "has no attributes.json" in problems[0]
    records = [
        {"file": f"images/{i}.png", "shape": "cube", "material": "rubber", "color": "red", "size": "large"}
        for i in range(3)
    ]
    (tmp_path / "attributes.json").write_text(json.dumps(records))
    _write(tmp_path / "images" / "0.png")
    problems, summary = check_data("clevr", tmp_path)
    assert problems == ["2 of 3 images listed in attributes.json are missing: images/1.png, images/2.png"]
    assert summary == "CLEVR renders: 1 images with attributes"
