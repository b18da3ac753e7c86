"""Shared helpers of the fault-injection tests: small random CMNIST classifier checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import lightning
import pytest
import torch

from nemo_train.models import ClassifierModule

os.environ.setdefault("WANDB_MODE", "disabled")


def write_checkpoint(path: Path, seed: int, num_classes: int = 10) -> str:
    """A randomly initialised CMNIST classifier (``seed``) saved as a Lightning checkpoint at ``path``."""
    torch.manual_seed(seed)
    module = ClassifierModule(backbone="bias_cnn", num_classes=num_classes)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
        },
        path,
    )
    return str(path)


@pytest.fixture
def checkpoint_factory():
    return write_checkpoint
