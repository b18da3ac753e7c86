"""A quiet Lightning trainer for the models the failure-mode search trains on the fly (no banners)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

import lightning as L

from nemo_train.models.trainer import quiet_trainer


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence Lightning's info messages and library deprecation warnings inside the block."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            yield
    finally:
        logger.setLevel(level)


def fit_quietly(module: L.LightningModule, datamodule: L.LightningDataModule, max_epochs: int, **kwargs) -> L.Trainer:
    """Fit ``module`` on CPU without logger, checkpoints, progress bar or model summary; returns the trainer."""
    with quiet():
        trainer = quiet_trainer(max_epochs=max_epochs, **kwargs)
        trainer.fit(module, datamodule=datamodule)
    return trainer
