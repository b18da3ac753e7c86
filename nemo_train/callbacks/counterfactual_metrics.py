"""Callback: counterfactual metrics (Table-1 style) of a PaRCE estimator at the end of each validation."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import (
    CounterfactualGenerator,
    LatentNearestNeighbor,
    ReconstructionCounterfactual,
)
from nemo_train.competency.evaluation import CounterfactualEvaluator, format_table
from nemo_train.competency.gradient_counterfactuals import ImageGradientDescent, LatentGradientDescent
from nemo_train.competency.parce import PaRCE
from nemo_train.errors import UserInputError
from nemo_train.metrics.perceptual import perceptual_distance


class CounterfactualMetricsCallback(L.Callback):
    """Runs counterfactual methods on fixed low-competency images at validation end and logs their metrics.

    Logs ``cf/<method>/<metric>`` scalars (success, perceptual distance, feature / latent similarity,
    FID / KID with their feature space in the name, seconds per image); with a ``WandbLogger`` also a
    Table-1 table ``cf/table`` and an image grid ``cf/grid`` (original | each method). Skipped during
    the sanity check and on epochs not divisible by ``every_n_epochs``.

    When the module being trained is a :class:`CompetencyAutoencoder` it replaces the estimator's
    autoencoder, and with ``refit=True`` the estimator is recalibrated on ``holdout`` first, so the
    metrics follow the autoencoder as it trains.

    Args:
        estimator: a PaRCE estimator (fitted, or ``refit=True`` with a holdout).
        images: the low-competency images ``[N, C, H, W]`` to explain.
        holdout: the calibration loader (dict batches with ``image`` and ``label``); its images are also the
            FID / KID reference set.
        methods: the counterfactual generators to run (default: Reco, LGD and LNN with the paper's settings),
            each configured by ``class_path`` / ``init_args``.
        alexnet_weights: AlexNet weights for LPIPS (else the torch hub cache, else ``1-ssim``).
        refit: recalibrate the estimator before each evaluation.
        every_n_epochs: evaluate every n-th validation epoch.
        grid_size: examples shown in the image grid.
    """

    def __init__(
        self,
        estimator: PaRCE,
        images: torch.Tensor,
        holdout,
        methods: list[CounterfactualGenerator] | None = None,
        alexnet_weights: str | None = None,
        refit: bool = True,
        every_n_epochs: int = 1,
        grid_size: int = 6,
    ) -> None:
        methods = (
            list(methods)
            if methods is not None
            else [ReconstructionCounterfactual(), LatentGradientDescent(), LatentNearestNeighbor()]
        )
        names = [m.name for m in methods]
        if len(set(names)) != len(names):
            raise UserInputError(f"methods {names} repeat a method; each names one row of the table")
        if every_n_epochs < 1:
            raise UserInputError(f"every_n_epochs={every_n_epochs}; expected at least 1")
        self.estimator, self.images, self.holdout = estimator, images, holdout
        self.generators, self.alexnet_weights = methods, alexnet_weights
        self.methods = tuple(names)
        self.refit, self.every_n_epochs, self.grid_size = refit, every_n_epochs, grid_size
        self.last_results: dict[str, dict[str, float]] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        estimator = self.estimator.to(pl_module.device)
        if isinstance(pl_module, CompetencyAutoencoder):
            estimator.autoencoder = pl_module
        was_training = pl_module.training
        estimator.eval()
        try:
            with torch.inference_mode(False), torch.enable_grad():
                if self.refit:
                    estimator.fit(self.holdout)
                rows, outputs = self._evaluate(estimator)
        finally:
            pl_module.train(was_training)
        self.last_results = rows
        values = {
            f"cf/{method}/{key}": value for method, row in rows.items() for key, value in row.items() if value == value
        }
        pl_module.log_dict(values, sync_dist=False)
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if loggers and trainer.is_global_zero:
            self._log_wandb(loggers, trainer.global_step, rows, outputs)

    def _evaluate(self, estimator: PaRCE):
        holdout_images = torch.cat([batch["image"] for batch in self.holdout])
        evaluator = CounterfactualEvaluator(estimator, holdout_images, perceptual_distance(self.alexnet_weights))
        rows, outputs = {}, {}
        rows["Orig"], _ = evaluator.evaluate(None, self.images)
        for generator in self.generators:
            if isinstance(generator, ImageGradientDescent) and generator.alexnet_weights is None:
                generator.alexnet_weights = self.alexnet_weights
            generator.bind(estimator).fit(holdout_images)
            rows[generator.name], outputs[generator.name] = evaluator.evaluate(generator, self.images)
        return rows, outputs

    def _log_wandb(self, loggers, step, rows, outputs) -> None:
        from torchvision.utils import make_grid

        from datamodules.explanations.images import to_pil

        keys = list(next(iter(rows.values())))
        data = [[method] + [row[k] for k in keys] for method, row in rows.items()]
        n = min(self.grid_size, len(self.images))
        columns = [self.images[:n].cpu()] + [outputs[m][:n] for m in self.methods]
        grid = make_grid(torch.stack(columns, 1).flatten(0, 1), nrow=len(columns), padding=2, pad_value=1.0)
        caption = "columns: original | " + " | ".join(self.methods)
        for logger in loggers:
            logger.log_table("cf/table", columns=["method", *keys], data=data, step=step)
            logger.log_image("cf/grid", [to_pil(grid)], caption=[caption], step=step)

    def table(self) -> str:
        """The last results in the Table-1 layout."""
        return format_table(self.last_results)
