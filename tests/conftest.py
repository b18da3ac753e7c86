"""Shared fixtures. Tests run on CPU with W&B disabled unless a test enables it itself."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
# a W&B run a test starts without naming its folder writes in the temp folder, never in the repository
os.environ.setdefault("WANDB_DIR", tempfile.mkdtemp(prefix="nemo-train-tests-wandb-"))

ROOT = Path(__file__).resolve().parents[1]
#: What the repository's top folder and ``checkpoints/`` held when the session started (tests add nothing there).
_BEFORE: set[str] = set()


def _repository_entries() -> set[str]:
    return {p.name for p in ROOT.iterdir()} | {f"checkpoints/{p.name}" for p in (ROOT / "checkpoints").glob("*")}


def pytest_sessionstart(session) -> None:
    _BEFORE.update(_repository_entries())


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the session when a test left something new in the repository (runs write where they are told)."""
    new = sorted(_repository_entries() - _BEFORE - {".pytest_cache", ".ruff_cache", ".import_linter_cache"})
    if new and not hasattr(session.config, "workerinput"):
        print(f"\ntests wrote into the repository: {', '.join(new)}", file=sys.stderr)
        session.exitstatus = 1


import lightning as L  # noqa: E402
import pytest  # noqa: E402
from training_seed import TRAINING_SEED  # noqa: E402


@pytest.fixture(scope="session")
def trained_cmnist_classifier():
    """A small CMNIST Model-A classifier trained for a few seconds: ``(module, datamodule)``.

    Good enough that the colour bias is visible; use it wherever a test needs a trained classifier.
    """
    from datamodules.cmnist import CMNISTDataModule
    from nemo_train.models import ClassifierModule
    from nemo_train.models.trainer import quiet_trainer

    L.seed_everything(TRAINING_SEED, verbose=False)
    datamodule = CMNISTDataModule(bias="model_a", train_size=3000, batch_size=64, test_styles=1)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(module, datamodule)
    module.eval()
    return module, datamodule


@pytest.fixture
def preset_cli(tmp_path):
    """Build (not run) the ``LightningCLI`` of a shipped preset on CPU without a logger, writing under ``tmp_path``:
    ``preset_cli("clevr/rubber.yaml", *more_args)`` (path relative to ``configs/``)."""
    from nemo_train.lightning_cli import NemoLightningCLI

    def build(preset: str, *args: str):
        config = Path(__file__).resolve().parents[1] / "configs" / preset
        base = ["--config", str(config), "--trainer.accelerator=cpu", "--trainer.logger=false"]
        return NemoLightningCLI(args=[*base, f"--trainer.default_root_dir={tmp_path}", *args], run=False)

    return build


def _save_lightning_checkpoint(module: L.LightningModule, path: Path) -> str:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": L.__version__,
    }
    torch.save(checkpoint, path)
    return str(path)


@pytest.fixture(scope="session")
def lightning_checkpoint():
    """``lightning_checkpoint(module, path) -> str``: ``module`` saved as a Lightning checkpoint file at ``path``
    (folders created) without a Trainer, as ``load_from_checkpoint`` reads it."""
    return _save_lightning_checkpoint


@pytest.fixture(scope="session")
def model_a_checkpoint(trained_cmnist_classifier, tmp_path_factory) -> str:
    """The session's trained CMNIST Model-A classifier saved at ``<tmp>/model_a/best.ckpt``."""
    module, _ = trained_cmnist_classifier
    return _save_lightning_checkpoint(module, tmp_path_factory.mktemp("ckpt") / "model_a" / "best.ckpt")


@pytest.fixture(scope="session")
def tiny_nico_classifier(tmp_path_factory) -> str:
    """The tiny ``lbee`` run's classifier (``tests/lbee_runs.py``): a bias CNN fitted for one epoch on the tiny
    NICO-like data, saved as a Lightning checkpoint."""
    from lbee_runs import DATA

    from datamodules.nico import NICODataModule
    from nemo_train.models import ClassifierModule
    from nemo_train.models.trainer import fit_quietly

    L.seed_everything(TRAINING_SEED, verbose=False)
    module = ClassifierModule(backbone="bias_cnn", num_classes=6, lr=3e-3)
    fit_quietly(module, NICODataModule(**DATA), 1, limit_val_batches=0)
    return _save_lightning_checkpoint(module, tmp_path_factory.mktemp("nico_cnn") / "checkpoints" / "best.ckpt")


@pytest.fixture(scope="session")
def lbee_one_process_run(tiny_nico_classifier, tmp_path_factory) -> tuple[Path, str]:
    """The tiny ``lbee`` run (``tests/lbee_runs.py``) on one process, uninterrupted, in this process as the
    command line runs it (``distributed_runs.run_in_process``): ``(out_dir, what it printed)``. The reference of
    the multi-process and kill tests; made once per session."""
    from distributed_runs import run_in_process
    from lbee_runs import lbee_argv, write_lbee_config

    folder = tmp_path_factory.mktemp("lbee_one_process")
    out = folder / "run"
    argv = lbee_argv(write_lbee_config(tiny_nico_classifier, folder / "lbee.yaml"), out, "--devices", "1")
    return out, run_in_process(argv, folder)


@pytest.fixture(scope="session")
def untrained_cmnist_pair(tmp_path_factory) -> str:
    """Two untrained CMNIST classifiers (seeds 0 and 1: their accuracies differ condition by condition), saved as
    ``model_a`` and ``model_b`` Lightning checkpoints: a ``--targets`` list."""
    from nemo_train.models import ClassifierModule

    folder, paths = tmp_path_factory.mktemp("pair"), []
    for name, seed in (("model_a", 0), ("model_b", 1)):
        L.seed_everything(seed, verbose=False)
        module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=1e-3)
        paths.append(_save_lightning_checkpoint(module, folder / name / "checkpoints" / "best.ckpt"))
    return f"[{paths[0]}, {paths[1]}]"


@pytest.fixture(scope="session")
def differences_one_process_run(untrained_cmnist_pair, tmp_path_factory) -> tuple[Path, str]:
    """The small ``differences`` run (``tests/differences_runs.py``) on one process, uninterrupted, in this
    process as the command line runs it (``distributed_runs.run_in_process``): ``(out_dir, what it printed)``.
    The reference of the multi-process and kill tests; made once per session."""
    from differences_runs import differences_argv
    from distributed_runs import run_in_process

    out = tmp_path_factory.mktemp("differences_one_process") / "run"
    return out, run_in_process(differences_argv(untrained_cmnist_pair, out, "--devices", "1"), out.parent)


@pytest.fixture(autouse=True)
def _no_wandb_run_outlives_its_test():
    """Finish a W&B run a test left open: Lightning's WandbLogger would otherwise adopt it in a later test."""
    yield
    wandb = sys.modules.get("wandb")  # only where a test imported it
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
