"""Bad data and size options through the real CLI: one ``nemo-train: error:`` line, exit status 2, no traceback.

Each case runs ``nemo-train fit --config <file>`` in-process (``nemo_train.cli.main``, from the case's own
folder), as a user would, with a folder or option that used to end in a traceback (or in silently wrong images).
The console script's own exit status and stderr are tested once, in a subprocess, by ``tests/test_cli.py``.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_errors import one_line_error
from PIL import Image

from datamodules.folder import read_image

pytestmark = pytest.mark.fault

ROOT = Path(__file__).parents[2]
SHAPES = ["cube", "cylinder", "sphere"]


def fit_error(tmp_path: Path, capsys, data: dict, num_classes: int = 3) -> str:
    """The one error line of ``nemo-train fit`` on a preset of ``data``, run from ``tmp_path``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        patch.setenv("WANDB_MODE", "disabled")
        return one_line_error(capsys, ["fit", "--config", str(fit_config(tmp_path, data, num_classes))])


def fit_config(tmp_path: Path, data: dict, num_classes: int = 3) -> Path:
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "max_epochs": 1,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(tmp_path / "run"),
        },
        "model": {
            "class_path": "nemo_train.models.ClassifierModule",
            "init_args": {"backbone": "bias_cnn", "num_classes": num_classes},
        },
        "data": data,
    }
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def clevr_folder(tmp_path: Path, records, count: int = 3, raw: bytes | None = None) -> Path:
    folder = tmp_path / "clevr"
    (folder / "images").mkdir(parents=True)
    for i in range(count):
        Image.fromarray(np.full((16, 16, 3), 40 * i, dtype=np.uint8)).save(folder / "images" / f"{i}.png")
    (folder / "attributes.json").write_bytes(raw if raw is not None else json.dumps(records).encode())
    return folder


def clevr_data(folder: Path) -> dict:
    return {
        "class_path": "datamodules.clevr.CLEVRDataModule",
        "init_args": {"data_dir": str(folder), "image_size": 16, "train_size": 12, "batch_size": 4},
    }


def record(i: int, **fields) -> dict:
    return {
        "file": f"images/{i}.png",
        "shape": SHAPES[i % 3],
        "material": "rubber",
        "color": "red",
        "size": "small",
    } | fields


def test_batch_size_zero_is_one_line(tmp_path, capsys):
    data = {"class_path": "datamodules.cmnist.CMNISTDataModule", "init_args": {"train_size": 20, "batch_size": 0}}
    line = fit_error(tmp_path, capsys, data, 10)
    assert "batch_size=0" in line and "positive" in line


def test_clevr_folder_too_small_for_a_training_split_is_one_line(tmp_path, capsys):
    folder = clevr_folder(tmp_path, [record(i) for i in range(3)])  # one image per cell: all go to the test split
    line = fit_error(tmp_path, capsys, clevr_data(folder))
    assert str(folder) in line and "training" in line and "expected at least 2" in line


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("non_string_file", "non-string file=5"),
        ("missing_object_fields", "lacks field(s) ['color']"),
        ("not_utf8", "is not UTF-8"),
        ("not_a_record", "is int 7; expected an object"),
    ],
)
def test_bad_attributes_json_is_one_line_naming_the_record(tmp_path, capsys, case, expected):
    records = [record(i) for i in range(3)]
    raw = None
    if case == "non_string_file":
        records[1]["file"] = 5
    elif case == "missing_object_fields":
        objects = [{k: v for k, v in record(i).items() if k != "file"} for i in range(3)]
        del objects[1]["color"]
        scenes = [{"image_filename": f"{i}.png", "objects": [o]} for i, o in enumerate(objects)]
        raw = json.dumps({"scenes": scenes}).encode()
    elif case == "not_utf8":
        raw = json.dumps(records).encode().replace(b"red", b"r\xe9d", 1)
    else:
        records[0] = 7
    folder = clevr_folder(tmp_path, records, raw=raw)
    line = fit_error(tmp_path, capsys, clevr_data(folder))
    assert "attributes.json" in line and expected in line
    named = {"non_string_file": "record 1", "missing_object_fields": "scene 1", "not_a_record": "record 0"}
    assert named.get(case, "") in line


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"class_path": "datamodules.cmnist.CMNISTDataModule", "init_args": {"test_styles": 100000}},
            "test_styles=100000 is out of range; expected 1 to 50",
        ),
        (
            {"class_path": "datamodules.clevr.CLEVRDataModule", "init_args": {"image_size": 4096}},
            "image_size=4096 is out of range; expected 8 to 128",
        ),
        (
            {"class_path": "datamodules.nico.NICODataModule", "init_args": {"test_per_pair": 10**6}},
            "test_per_pair=1000000 is out of range",
        ),
        (
            {"class_path": "datamodules.nico.NICODataModule", "init_args": {"image_size": 128, "train_size": 100000}},
            "GiB",
        ),
    ],
    ids=["cmnist_test_styles", "clevr_image_size", "nico_test_per_pair", "nico_total_bytes"],
)
def test_oversized_options_are_refused_before_any_allocation(tmp_path, capsys, data, expected):
    assert expected in fit_error(tmp_path, capsys, data, 10)


def test_sixteen_bit_png_is_scaled_not_clipped(tmp_path):
    ramp = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 16).astype(np.uint16)  # 0 .. 65520
    path = tmp_path / "wide.png"
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode.startswith("I")
    image = read_image(path, 64, "stretch")
    expected = np.rint(ramp / 257.0).astype(np.uint8)
    assert np.array_equal(image[..., 0], expected) and np.array_equal(image[..., 1], image[..., 2])
    assert len(np.unique(image)) == 256  # clipping at 255 would leave 16 grey levels here
    # the datamodule path reads it the same way
    folder = clevr_folder(tmp_path, [record(i) for i in range(3)])
    Image.fromarray(ramp).save(folder / "images" / "0.png")
    from datamodules.folder import load_images

    loaded = load_images([folder / "images" / "0.png"], 64, resize="stretch")
    assert torch.equal(loaded.images[0, 0], torch.from_numpy(expected))
