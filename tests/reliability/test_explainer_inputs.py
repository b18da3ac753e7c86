"""Bad explainer inputs end in one line naming the file and line, exit status 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forked_commands
import pytest
import torch
from PIL import Image

from datamodules.explanations import ConversationEncoder, ExplanationPairsDataset, read_records
from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule
from nemo_train.models.vlm import load_processor

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.fault


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    os.environ["NEMO_TRAIN_CACHE"] = str(root)
    return root


@pytest.fixture(scope="module")
def adapter(cache, tmp_path_factory):
    torch.set_num_threads(1)
    module = ExplainerModule(lora_r=2)
    module.configure_model()
    return module.save_adapter(tmp_path_factory.mktemp("adapter"))


def _png(path: Path, size=(28, 28)) -> str:
    Image.new("RGB", size, (200, 30, 30)).save(path)
    return path.name


def _bomb(path: Path) -> str:
    Image.new("1", (9000, 8000)).save(path)  # 72 M pixels in a small file
    return path.name


def _explain(adapter: Path, pairs: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NEMO_TRAIN_CACHE": str(cache), "WANDB_MODE": "disabled"}
    command = [sys.executable, "-m", "nemo_train.cli", "explain", "--model", str(adapter), "--pairs", str(pairs)]
    command += ["--out_dir", str(pairs.with_suffix(".out")), "--generation.max_new_tokens=2"]
    return forked_commands.run(command, env, pairs.parent, timeout=300)  # a process of its own, forked pre-imported


def _one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("nemo-train: error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_non_utf8_bytes(tmp_path, adapter, cache):
    pairs = tmp_path / "pairs.jsonl"
    good = json.dumps({"image": _png(tmp_path / "a.png"), "explanation": "Noise."})
    pairs.write_bytes(good.encode() + b'\n{"image": "a.png", "explanation": "caf\xe9"}\n')
    _one_line_error(_explain(adapter, pairs, cache), f"{pairs}:2", "not UTF-8")


def test_non_string_explanation(tmp_path, adapter, cache):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"image": _png(tmp_path / "a.png"), "explanation": 42}) + "\n")
    _one_line_error(_explain(adapter, pairs, cache), f"{pairs}:1", "'explanation' is int 42; expected a string")


def test_decompression_bomb_image(tmp_path, adapter, cache):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"image": _png(tmp_path / "a.png")}, {"image": _bomb(tmp_path / "bomb.png")}]
    pairs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _one_line_error(_explain(adapter, pairs, cache), f"{pairs}:", "bomb.png", "9000x8000 pixels")


def test_decompression_bomb_in_training_pairs(tmp_path, cache):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"image": _png(tmp_path / "a.png"), "explanation": "Noise."}]
    rows.append({"image": _bomb(tmp_path / "bomb.png"), "explanation": "Noise."})
    pairs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    encoder = ConversationEncoder(load_processor("embedded:tiny-qwen2-vl"), max_length=256)
    with pytest.raises(UserInputError, match=rf"{pairs}:2: image .*bomb.png.* is 9000x8000 pixels"):
        ExplanationPairsDataset(read_records(pairs), encoder)
