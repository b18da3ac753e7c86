"""Test helper: the tiny ``lbee`` run that ``tests/lbee/test_lbee_distributed.py`` and
``tests/reliability/test_kill_every_command.py`` start (a classifier fitted for one epoch on tiny NICO-like
data, a tiny joint space trained into ``<out_dir>/clip``, the default place). Its uninterrupted one-process
run is made once per session (``tests/conftest.py``: ``lbee_one_process_run``) and is the reference of both."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import forked_commands
import yaml

from tests.models.tiny_clip import TINY_CLIP

ROOT = Path(__file__).resolve().parents[1]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
DATA = {"correlation": 0.85, "image_size": 16, "train_size": 240, "test_per_pair": 4, "batch_size": 32}


def lbee_config(classifier: str) -> dict:
    """The run's settings; ``--out_dir`` says where it writes (its joint space goes to ``<out_dir>/clip``)."""
    return {
        "data": {"class_path": "datamodules.nico.NICODataModule", "init_args": DATA},
        "encoder": {
            "class_path": "nemo_train.lbee.encoders.SyntheticCLIP",
            "init_args": {
                "train_per_source": 96,
                "max_epochs": 1,
                "batch_size": 32,
                "group_size": 3,
                "model": {**TINY_CLIP, "attribute_head_weight": 1.0},
            },
        },
        "search": {"clustering": {"n_clusters": 4}, "tau": 1.0, "tau_scale": "sentence_z"},
        "classifier": classifier,
        "evaluation": {"sweep": [0.0, 0.5], "batch_size": 16},  # several batches to share out
        "device": "cpu",
    }


def write_lbee_config(classifier: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(lbee_config(classifier)))
    return path


def lbee_argv(config: Path, out: Path, *args: str) -> list[str]:
    return [NEMO_TRAIN, "lbee", "--config", str(config), "--out_dir", str(out), *args]


def run_lbee(config: Path, out: Path, devices: int) -> str:
    """Run the tiny lbee run into ``out`` on ``devices`` processes to its end (the first forked pre-imported:
    ``tests/forked_commands.py``); what it printed."""
    done = forked_commands.run(lbee_argv(config, out, "--devices", str(devices)), ENV, out.parent, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
