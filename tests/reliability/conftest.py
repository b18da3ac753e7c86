"""Shared helpers of the fault-injection tests: small random CMNIST classifier checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from nemo_train.models import ClassifierModule

os.environ.setdefault("WANDB_MODE", "disabled")


@pytest.fixture
def checkpoint_factory(lightning_checkpoint):
    """``checkpoint_factory(path, seed, num_classes=10) -> str``: a randomly initialised CMNIST classifier
    (``seed``) saved as a Lightning checkpoint at ``path``."""

    def write_checkpoint(path: Path, seed: int, num_classes: int = 10) -> str:
        torch.manual_seed(seed)
        return lightning_checkpoint(ClassifierModule(backbone="bias_cnn", num_classes=num_classes), path)

    return write_checkpoint
