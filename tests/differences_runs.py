"""Test helper: the small ``differences`` run that ``tests/differences/test_differences_distributed.py`` and
``tests/reliability/test_kill_every_command.py`` start (the shipped CMNIST config on two untrained classifiers,
shrunk; the heat map still measures the whole 1,300-condition grid). Its uninterrupted one-process run is made
once per session (``tests/conftest.py``: ``differences_one_process_run``) and is the reference of both."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import forked_commands

ROOT = Path(__file__).resolve().parents[1]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def differences_argv(targets: str, out: Path, *args: str) -> list[str]:
    return [
        NEMO_TRAIN, "differences", "--config", str(ROOT / "configs/differences/cmnist.yaml"), "--out_dir", str(out),
        "--wandb", "false", "--device", "cpu", "--targets", targets,
        "--sampling.samples_per_condition", "2", "--sampling.images_per_batch", "50",  # several chunks per process
        "--protocol.test_conditions", "16", "--protocol.observed_conditions", "9",
        "--protocol.attribution_questions", "4", "--optimization.iterations", "2",
        "--optimization.conditions_per_iteration", "3", "--optimization.initial_conditions", "5", *args,
    ]  # fmt: skip


def run_differences(targets: str, out: Path, devices: int) -> str:
    """Run it into ``out`` (started in its parent folder) on ``devices`` processes to its end (the first forked
    pre-imported: ``tests/forked_commands.py``); what it printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = differences_argv(targets, out, "--devices", str(devices))
    done = forked_commands.run(argv, ENV, out.parent, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
