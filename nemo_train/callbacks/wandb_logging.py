"""Callbacks that put a sample-image grid and a per-group accuracy table into W&B."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from torchvision.utils import make_grid

from datamodules.explanations.images import to_pil


def wandb_loggers(trainer: L.Trainer) -> list[WandbLogger]:
    """The trainer's W&B loggers (empty when W&B is not in use)."""
    return [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]


class SampleGridCallback(L.Callback):
    """Logs a grid of the first training images, captioned ``label/group``, once at the start of fit."""

    def __init__(self, num_images: int = 32, nrow: int = 8) -> None:
        self.num_images = num_images
        self.nrow = nrow

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = wandb_loggers(trainer)
        if not loggers or not trainer.is_global_zero:
            return
        batch = next(iter(trainer.datamodule.train_dataloader()))
        images = batch["image"][: self.num_images]
        grid = make_grid(images.float().cpu(), nrow=self.nrow, padding=2, pad_value=1.0)
        groups = getattr(trainer.datamodule, "group_names", None)
        captions = [
            f"{int(label)}/{groups[int(group)] if groups else int(group)}"
            for label, group in zip(batch["label"][: self.num_images], batch["group"][: self.num_images])
        ]
        picture = to_pil(grid)  # W&B casts a float tensor to integers: a [0, 1] grid handed over as is logs black
        for logger in loggers:
            logger.log_image("samples/train_grid", [picture], caption=[" ".join(captions)], step=trainer.global_step)


class GroupAccuracyTableCallback(L.Callback):
    """Logs a W&B table ``(stage, group, accuracy)`` from the ``<stage>/acc_*`` metrics after each evaluation.

    Runs after validation (not during the sanity check) and after testing; does nothing without a
    ``WandbLogger``.
    """

    def _log(self, trainer: L.Trainer, stage: str) -> None:
        loggers = wandb_loggers(trainer)
        if not loggers or trainer.sanity_checking or not trainer.is_global_zero:
            return
        prefix = f"{stage}/acc_"
        rows = [
            [stage, key[len(prefix) :], float(value)]
            for key, value in sorted(trainer.callback_metrics.items())
            if key.startswith(prefix) and isinstance(value, (torch.Tensor, float))
        ]
        if not rows:
            return
        for logger in loggers:
            logger.log_table(
                f"{stage}/group_accuracy", columns=["stage", "group", "accuracy"], data=rows, step=trainer.global_step
            )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, "test")
