"""Fixtures of the explainer tests: one thread (the CI machine is shared), a private tiny-model cache."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    torch.set_num_threads(1)  # several OpenMP threads on a shared 2-core machine are ~10x slower here


@pytest.fixture(scope="session")
def explainer_cache(tmp_path_factory):
    """A session cache folder for the embedded tiny model (set as ``NEMO_TRAIN_CACHE``)."""
    root = tmp_path_factory.mktemp("nemo_cache")
    os.environ["NEMO_TRAIN_CACHE"] = str(root)
    return root


@pytest.fixture(scope="session")
def six_cause_pairs(tmp_path_factory, explainer_cache):
    """Small embedded six-cause pairs: ``{"train": Path, "val": Path}`` (12 + 3 per cause)."""
    from datamodules.explanations import build_six_cause_pairs

    return build_six_cause_pairs(tmp_path_factory.mktemp("pairs"), per_cause=4, seed=0, val_fraction=0.25)


@pytest.fixture(scope="session")
def tiny_real(tmp_path_factory):
    """Tiny random Qwen2.5-VL, Qwen3-VL and Mllama checkpoints: ``{"qwen2_5_vl": Path, "qwen3_vl": Path, "mllama": Path}``."""
    from tests.explainer.tiny_real import build

    root = tmp_path_factory.mktemp("tiny_real")
    return {family: build(family, root / family) for family in ("qwen2_5_vl", "qwen3_vl", "mllama")}
