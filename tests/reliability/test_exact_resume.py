"""``fit --ckpt_path last`` after a kill ends with the weights of a run that was never stopped
(``nemo_train.callbacks.resume``: a ``last.ckpt`` every epoch, the random states saved in it and restored)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from datamodules.captions import GroupBatchSampler
from nemo_train.cli import main

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[2]


class KillAtEpoch(L.Callback):
    """SIGKILLs its own process when ``epoch`` starts (after the previous epoch's checkpoints were written)."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


def tiny_fit_config(tmp_path: Path, name: str, root: Path, *, max_epochs: int = 3, kill_at: int | None = None) -> Path:
    """configs/cmnist/model_a.yaml shrunk (200 images, no logger) into ``root``."""
    config = yaml.safe_load((ROOT / "configs/cmnist/model_a.yaml").read_text())
    config["trainer"].update(
        max_epochs=max_epochs,
        default_root_dir=str(root),
        enable_progress_bar=False,
        accelerator="cpu",
        logger=False,
        log_every_n_steps=1,
    )
    config["trainer"]["callbacks"] = config["trainer"]["callbacks"][:1]  # the preset's ModelCheckpoint
    if kill_at is not None:
        config["trainer"]["callbacks"].append(
            {"class_path": "test_exact_resume.KillAtEpoch", "init_args": {"epoch": kill_at}}
        )
    config["data"]["init_args"].update(train_size=200, test_styles=1, batch_size=32)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def test_a_run_killed_after_an_epoch_resumes_to_the_same_weights(tmp_path):
    """Every fit runs in its own process with one thread, so the comparison does not depend on what this test
    process ran before (another test may have changed torch's thread count: CPU sums differ across counts); each
    is forked pre-imported from a process that ran nothing (``tests/forked_commands.py``)."""
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(ROOT)]),
    }

    import forked_commands  # here: the killed fit imports this module for KillAtEpoch, with tests/ off its path

    def fit(config: Path, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "nemo_train.cli", "fit", "--config", str(config), *args]
        return forked_commands.run(command, env, ROOT)

    whole_run = fit(tiny_fit_config(tmp_path, "whole", tmp_path / "whole"))
    assert whole_run.returncode == 0, whole_run.stderr[-2000:]
    killed = tmp_path / "killed"
    proc = fit(tiny_fit_config(tmp_path, "killed", killed, kill_at=2))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert load(killed / "checkpoints" / "last.ckpt")["epoch"] == 1
    resumed_run = fit(tiny_fit_config(tmp_path, "resume", killed), "--ckpt_path", "last")
    assert resumed_run.returncode == 0, resumed_run.stderr[-2000:]
    whole, resumed = load(tmp_path / "whole/checkpoints/last.ckpt"), load(killed / "checkpoints/last.ckpt")
    assert (whole["epoch"], whole["global_step"]) == (resumed["epoch"], resumed["global_step"]) == (2, 21)
    assert whole["state_dict"].keys() == resumed["state_dict"].keys()
    for name, tensor in whole["state_dict"].items():
        assert torch.equal(tensor, resumed["state_dict"][name]), name
    for a, b in zip(whole["optimizer_states"][0]["state"].values(), resumed["optimizer_states"][0]["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_last_checkpoint_is_written_every_epoch_not_only_when_the_best_one_is(tmp_path):
    root = tmp_path / "run"
    config = tiny_fit_config(tmp_path, "flat", root)
    main(["fit", "--config", str(config), "--model.init_args.lr", "0"])  # val/acc never improves after epoch 0
    assert load(root / "checkpoints" / "best.ckpt")["epoch"] == 0
    assert load(root / "checkpoints" / "last.ckpt")["epoch"] == 2
    assert sorted(p.name for p in (root / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]  # no scratch file


def test_a_group_batch_sampler_told_the_epoch_draws_that_epochs_order():
    group = torch.arange(24) // 3
    uninterrupted = GroupBatchSampler(group, batch_size=6, seed=5)
    orders = [list(uninterrupted) for _ in range(3)]
    resumed = GroupBatchSampler(group, batch_size=6, seed=5)
    resumed.set_epoch(2)
    assert list(resumed) == orders[2] != orders[1]


def test_counterfactuals_rerun_on_a_saved_estimator_gives_the_same_table(tmp_path, checkpoint_factory):
    """A rerun reuses the estimator saved in ``out_dir`` (nothing is trained before the rows are scored): every
    row, KID included, equals the first run's."""
    import json

    from nemo_train.cli import run_pipeline

    config = {
        "datamodule": {
            "class_path": "datamodules.cmnist.CMNISTDataModule",
            "init_args": {"train_size": 300, "test_styles": 1, "batch_size": 32},
        },
        "autoencoder": {
            "class_path": "nemo_train.competency.autoencoder.CompetencyAutoencoder",
            "init_args": {"image_size": 28, "widths": [8, 16], "latent_dim": 16},
        },
        "methods": [
            {"class_path": "nemo_train.competency.counterfactuals.ReconstructionCounterfactual"},
            {"class_path": "nemo_train.competency.counterfactuals.LatentNearestNeighbor"},
        ],
        "classifier": checkpoint_factory(tmp_path / "classifier.ckpt", seed=3),
        "out_dir": str(tmp_path / "out"),
        "causes": {"per_cause": 2},
        "estimator": {"threshold": 0.1},
        "train": {"autoencoder_epochs": 1},
        "device": "cpu",
    }
    path = tmp_path / "cf.yaml"
    path.write_text(yaml.safe_dump(config))
    results = tmp_path / "out" / "results.json"
    run_pipeline("counterfactuals", ["--config", str(path)])
    first = json.loads(results.read_text())["table"]
    estimator_written = (tmp_path / "out" / "parce" / "parce.safetensors").stat().st_mtime_ns
    run_pipeline("counterfactuals", ["--config", str(path)])
    assert (tmp_path / "out" / "parce" / "parce.safetensors").stat().st_mtime_ns == estimator_written  # reused
    again = json.loads(results.read_text())["table"]
    assert any(key.startswith("kid") for key in first["Orig"])
    untimed = {method: {k: v for k, v in row.items() if k != "sec_per_image"} for method, row in first.items()}
    assert {method: {k: row[k] for k in untimed[method]} for method, row in again.items()} == untimed
