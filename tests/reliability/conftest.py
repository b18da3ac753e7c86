"""Shared helpers of the fault-injection tests: small random CMNIST classifier checkpoints and a tiny explainer
adapter with random LoRA weights."""

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


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A saved adapter of the embedded tiny explainer (random LoRA weights, rank 2), once per test module."""
    from nemo_train.explainer import ExplainerModule

    os.environ.setdefault("NEMO_TRAIN_CACHE", str(tmp_path_factory.mktemp("cache")))
    torch.set_num_threads(1)
    module = ExplainerModule(lora_r=2)
    module.configure_model()
    return module.save_adapter(tmp_path_factory.mktemp("adapter"))
