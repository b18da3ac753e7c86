"""Damaged state left by an earlier run or a bad copy: each is one line naming the file and what to do, or is
set aside with one warning and recomputed; never a traceback."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
import torch

from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule

pytestmark = pytest.mark.fault


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_reply_cache_rows_that_are_not_json_are_asked_again_with_one_warning(tmp_path, caplog):
    from nemo_train.backends import ScriptedBackend, user_message
    from nemo_train.backends.cache import ResponseCache

    backend = ScriptedBackend(lambda messages: "fresh", model="m", cache=tmp_path / "cache")
    assert backend.chat([user_message("hi")]) == ["fresh"]
    path = backend.cache.path
    backend.cache.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE replies SET value = ?", ('["cut sho',))
        db.execute("INSERT INTO replies (key, model, value) VALUES ('k2', 'm', '{\"not\": \"a list\"}')")
    backend = ScriptedBackend(lambda messages: "fresh", model="m", cache=ResponseCache(path))
    with caplog.at_level(logging.WARNING, logger="nemo_train.backends.cache"):
        assert backend.chat([user_message("hi")]) == ["fresh"]  # asked again, not a JSONDecodeError
        assert backend.cache.get("k2") is None
    assert backend.stats.requests == 1 and backend.chat([user_message("hi")]) == ["fresh"]
    assert backend.stats.cache_hits == 1  # the bad row was replaced by the new reply
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_diff_model_cache_is_measured_again(tmp_path, caplog, damage):
    from nemo_train.differences.diff_model import DiffModel
    from nemo_train.differences.generators import CMNISTGenerator
    from nemo_train.differences.models import SpecClassifier

    torch.manual_seed(0)
    a = SpecClassifier.from_module("A", ClassifierModule(backbone="bias_cnn", num_classes=10))
    b = SpecClassifier.from_module("B", ClassifierModule(backbone="bias_cnn", num_classes=10))
    generator, cache = CMNISTGenerator(), tmp_path / "diff_model_cache.json"
    conditions = generator.grid()[:3]
    fresh = DiffModel(a, b, generator, n=2, cache_file=cache)(conditions)
    if damage == "truncated":
        truncate(cache)
    else:
        cache.write_bytes(b"\x00\xffnot json at all")
    with caplog.at_level(logging.WARNING):
        again = DiffModel(a, b, generator, n=2, cache_file=cache)
    assert again.cache == {} and any(str(cache) in r.getMessage() for r in caplog.records)
    assert list(again(conditions)) == list(fresh)
    assert len(json.loads(cache.read_text())) == 3  # rewritten whole


def test_a_truncated_classifier_is_one_line_naming_it(tmp_path):
    from nemo_train.models.loading import load_classifier

    path = tmp_path / "best.ckpt"
    module = ClassifierModule(backbone="bias_cnn", num_classes=10)
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    truncate(path)
    with pytest.raises(UserInputError) as err:
        load_classifier(path)
    assert str(path) in str(err.value) and "cannot be read" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("loader", ["lbee", "nemo-eval"])
def test_a_truncated_clip_safetensors_is_one_line_naming_it(tmp_path, loader):
    from nemo_train.models.clip import CLIPEncoder, CLIPModule
    from nemo_train.models.image_text import ImageTextEncoder
    from tests.models.tiny_clip import TINY_CLIP

    CLIPModule(**TINY_CLIP).export(str(tmp_path / "clip"))
    weights = tmp_path / "clip" / "model.safetensors"
    truncate(weights)
    load = CLIPEncoder if loader == "lbee" else lambda path: ImageTextEncoder.from_pretrained(str(path))
    with pytest.raises(UserInputError) as err:
        load(tmp_path / "clip")
    message = str(err.value)
    assert str(tmp_path / "clip") in message and "\n" not in message


@pytest.mark.parametrize("subcommand,ckpt", [("fit", "last"), ("test", "file")])
def test_a_truncated_checkpoint_for_ckpt_path_is_one_line(tmp_path, capsys, subcommand, ckpt):
    from nemo_train.cli import main

    root = tmp_path / "run"
    path = root / "checkpoints" / ("last.ckpt" if ckpt == "last" else "epoch=0.ckpt")
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": ClassifierModule(backbone="bias_cnn", num_classes=10).state_dict()}, path)
    truncate(path)
    preset = Path(__file__).resolve().parents[2] / "configs" / "cmnist" / "model_a.yaml"
    args = [subcommand, "--config", str(preset), "--trainer.default_root_dir", str(root), "--trainer.logger", "false"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--ckpt_path", "last" if ckpt == "last" else str(path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.startswith("nemo-train: error: checkpoint") and str(path) in err and "damaged" in err
    assert len(err.splitlines()) == 1
