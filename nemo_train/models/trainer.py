"""A quiet Lightning trainer for models trained inside a pipeline or a benchmark."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L

#: What a trainer inside a pipeline leaves out: logger, checkpoints, model summary, progress bar, sanity steps.
QUIET_TRAINER_ARGS: dict[str, Any] = {
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_model_summary": False,
    "enable_progress_bar": False,
    "num_sanity_val_steps": 0,
}


def quiet_trainer(max_epochs: int | None = 1, accelerator: str = "cpu", **overrides: Any) -> L.Trainer:
    """A ``Trainer`` with :data:`QUIET_TRAINER_ARGS`; ``overrides`` are further ``Trainer`` arguments (or replace them)."""
    return L.Trainer(**{"max_epochs": max_epochs, "accelerator": accelerator, **QUIET_TRAINER_ARGS, **overrides})


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's info lines (accelerator found, tips) off while training inside a pipeline; warnings stay."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
