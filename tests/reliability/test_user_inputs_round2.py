"""Careless input to ``explain``, ``counterfactuals``, ``distill-teacher``, ``demo`` and ``lbee``: one line
naming what is wrong, exit status 2, before the model is loaded or anything is computed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from cli_errors import one_line_error
from PIL import Image

from nemo_train.cli import main

pytestmark = pytest.mark.fault


def _png(path: Path) -> str:
    Image.new("RGB", (28, 28), (200, 30, 30)).save(path)
    return str(path)


def _bad_image(tmp_path: Path, kind: str) -> str:
    path = tmp_path / "bad.png"
    if kind == "not_an_image":
        path.write_text("these are words, not pixels\n")
    elif kind == "empty":
        path.write_bytes(b"")
    else:  # a PNG cut short
        path.write_bytes(Path(_png(tmp_path / "whole.png")).read_bytes()[:60])
    return str(path)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("not_an_image", "is not a readable image"), ("empty", "is empty (0 bytes)"), ("truncated", "not a readable")],
)
def test_explain_with_an_unreadable_image_is_one_line(tmp_path, capsys, kind, expected):
    images = json.dumps([_png(tmp_path / "good.png"), _bad_image(tmp_path, kind)])
    argv = ["explain", "--model", "not-loaded", "--images", images, "--out_dir", str(tmp_path / "out")]
    err = one_line_error(capsys, argv)
    assert expected in err and "bad.png" in err


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("batch_size", "0", "generation.batch_size=0; expected at least 1"),
        ("max_new_tokens", "-1", "generation.max_new_tokens=-1; expected at least 1"),
        ("top_p", "0", "generation.top_p=0.0; expected a value in (0, 1]"),
    ],
)
def test_explain_generation_options_out_of_range_are_one_line(tmp_path, capsys, option, value, expected):
    argv = ["explain", "--model", "not-loaded", "--images", json.dumps([_png(tmp_path / "a.png")])]
    argv += ["--out_dir", str(tmp_path / "out"), f"--generation.{option}", value]
    assert expected in one_line_error(capsys, argv)
    assert not (tmp_path / "out" / "explanations.jsonl").exists()


def test_explain_writes_null_not_nan_for_causes_without_pairs(tmp_path, tmp_path_factory):
    from nemo_train.explainer import ExplainerModule

    os.environ.setdefault("NEMO_TRAIN_CACHE", str(tmp_path_factory.mktemp("cache")))
    torch.set_num_threads(1)
    module = ExplainerModule(lora_r=2)
    module.configure_model()
    adapter = module.save_adapter(tmp_path / "adapter")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"image": _png(tmp_path / "a.png"), "cause": "noise"}) + "\n")
    out = tmp_path / "out"
    main(["explain", "--model", str(adapter), "--pairs", str(pairs), "--out_dir", str(out)] + ["--device", "cpu"])
    text = (out / "explanations.jsonl.accuracy.json").read_text()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the accuracy file")

    table = json.loads(text, parse_constant=refuse)
    assert table["noise"] in (0.0, 1.0) and None in table.values()


def test_counterfactuals_with_a_classifier_as_the_autoencoder_checkpoint_is_one_line(
    tmp_path, capsys, checkpoint_factory
):
    classifier = checkpoint_factory(tmp_path / "classifier.ckpt", seed=1)
    config = {
        "datamodule": {
            "class_path": "datamodules.cmnist.CMNISTDataModule",
            "init_args": {"train_size": 100, "test_styles": 1, "batch_size": 32},
        },
        "classifier": classifier,
        "estimator": {"autoencoder_checkpoint": classifier},
        "out_dir": str(tmp_path / "out"),
        "device": "cpu",
    }
    (tmp_path / "cf.yaml").write_text(yaml.safe_dump(config))
    err = one_line_error(capsys, ["counterfactuals", "--config", str(tmp_path / "cf.yaml")])
    assert f"autoencoder checkpoint {classifier!r} is not a CompetencyAutoencoder checkpoint" in err
    assert not (tmp_path / "out" / "parce").exists()


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("counterfactuals", []),
        ("distill-teacher", ["--classifier", "missing.ckpt"]),
        ("demo", []),
        ("lbee", ["--data", "datamodules.nico.NICODataModule"]),
    ],
)
def test_out_dir_that_is_a_file_is_one_line(tmp_path, capsys, command, extra):
    afile = tmp_path / "afile"
    afile.write_text("x")
    err = one_line_error(capsys, [command, *extra, "--out_dir", str(afile)])
    assert f"out_dir '{afile}' is a file" in err and afile.read_text() == "x"
