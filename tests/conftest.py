"""Shared fixtures. Tests run on CPU with W&B disabled unless a test enables it itself."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import lightning as L  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def trained_cmnist_classifier():
    """A small CMNIST Model-A classifier trained for a few seconds: ``(module, datamodule)``.

    Good enough that the colour bias is visible; use it wherever a test needs a trained classifier.
    """
    from datamodules.cmnist import CMNISTDataModule
    from nemo_train.models import ClassifierModule

    L.seed_everything(0, verbose=False)
    datamodule = CMNISTDataModule(bias="model_a", train_size=3000, batch_size=64, test_styles=1)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule)
    module.eval()
    return module, datamodule
