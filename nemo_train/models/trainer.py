"""The quiet Lightning trainer for every model trained inside a pipeline, a benchmark or a test.

:func:`quiet_trainer` builds it (no logger, checkpoints, model summary, progress bar or sanity steps),
:func:`quiet_lightning` hides Lightning's info lines and the libraries' deprecation notices around a fit,
and :func:`fit_quietly` does both for one ``fit``.
"""

from __future__ import annotations

import logging
import warnings
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

#: Warnings a fit inside a pipeline raises that say nothing to its user (messages as regular expressions).
UNINFORMATIVE_WARNINGS: tuple[str, ...] = (".*LeafSpec.*", ".*does not have many workers.*")


def quiet_trainer(max_epochs: int | None = 1, accelerator: str = "cpu", **overrides: Any) -> L.Trainer:
    """A ``Trainer`` with :data:`QUIET_TRAINER_ARGS`; ``overrides`` are further ``Trainer`` arguments (or replace them)."""
    return L.Trainer(**{"max_epochs": max_epochs, "accelerator": accelerator, **QUIET_TRAINER_ARGS, **overrides})


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Inside the block, Lightning's info lines (accelerator found, tips), deprecation notices and the
    :data:`UNINFORMATIVE_WARNINGS` are hidden; other warnings stay."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            for message in UNINFORMATIVE_WARNINGS:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        logger.setLevel(level)


def fit_quietly(
    module: L.LightningModule,
    datamodule: L.LightningDataModule,
    max_epochs: int | None = 1,
    accelerator: str = "cpu",
    **overrides: Any,
) -> L.Trainer:
    """Fit ``module`` on ``datamodule`` with a :func:`quiet_trainer` inside :func:`quiet_lightning`; returns the
    trainer (its ``callback_metrics`` hold the last validation's numbers)."""
    with quiet_lightning():
        trainer = quiet_trainer(max_epochs, accelerator, **overrides)
        trainer.fit(module, datamodule=datamodule)
    return trainer
