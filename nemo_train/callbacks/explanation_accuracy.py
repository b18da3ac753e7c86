"""Explanation accuracy of an MLLM explainer on held-out pairs, per cause."""

from __future__ import annotations

import math

import lightning as L
import torch
import wandb
from lightning.pytorch.loggers import WandbLogger
from torchmetrics import MeanMetric, MetricCollection

from datamodules.explanations import to_pil
from nemo_train.explainer.lockstep import answer_held_out
from nemo_train.metrics.means import present_means
from nemo_train.vocabulary import CAUSES, predicted_cause

#: what grades an explanation here (in the W&B table's column title)
GRADER = "keyword rule standing in for manual grading"


class ExplanationAccuracyCallback(L.Callback):
    """After each validation, explains the datamodule's held-out pairs greedily and scores them.

    An explanation is correct when it names the pair's true cause and no other cause
    (:func:`nemo_train.vocabulary.is_correct`): a keyword rule over the cause vocabulary that stands in for the
    manual grading of explanations, not a model or a person; the W&B table says so in its column title
    (:data:`GRADER`). The metric keeps the name ``val/explanation_acc`` (checkpoint monitors use it).
    Logs ``val/explanation_acc`` (the mean over the causes
    present: the headline number) and ``val/explanation_acc/<cause>``, also kept in :attr:`last_result`
    (``{"<cause>": ..., "average": ...}``); with a ``WandbLogger`` attached, also a table of (image,
    cause, target, generated, correct). Skipped during the sanity check. Under DDP each rank explains
    its share and the per-cause means (torchmetrics ``MeanMetric``) are reduced across ranks; under
    FSDP / DeepSpeed ZeRO-3 generation runs on the sharded model and every rank makes the same number of
    ``generate`` calls, however the pairs split (:func:`nemo_train.explainer.lockstep.explain_in_lockstep`). The datamodule
    must expose ``val_records`` (see :class:`datamodules.explanations.ExplanationDataModule`).

    Args:
        every_n_epochs: run after every n-th validation.
        max_samples: explain at most this many held-out pairs (all by default).
        max_new_tokens, batch_size: generation settings.
        causes: the cause vocabulary (default: the six causes of low competency).
        table_rows: rows of the W&B table.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        max_samples: int | None = None,
        max_new_tokens: int = 32,
        batch_size: int = 32,
        causes: list[str] | None = None,
        table_rows: int = 48,
    ) -> None:
        self.every_n_epochs = max(1, every_n_epochs)
        self.max_samples = max_samples
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.causes = tuple(causes or CAUSES)
        self.table_rows = table_rows
        self.accuracy = MetricCollection({cause: MeanMetric() for cause in self.causes}, compute_groups=False)
        self.last_result: dict[str, float] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        records = [r for r in getattr(trainer.datamodule, "val_records", []) if r.cause in self.causes]
        records = records[: self.max_samples] if self.max_samples else records
        if not records:
            return
        mine = records[trainer.global_rank :: trainer.world_size]
        # under FSDP / ZeRO-3 every rank takes part in the same number of sharded generate calls
        texts = answer_held_out(trainer, pl_module, mine, self.max_new_tokens, self.batch_size)
        correct = [predicted_cause(t, self.causes) == r.cause for r, t in zip(mine, texts)]
        self.accuracy = self.accuracy.to(pl_module.device)
        for record, hit in zip(mine, correct):
            self.accuracy[record.cause].update(torch.tensor(float(hit), device=pl_module.device))
        result = present_means(self.accuracy)  # a cause without pairs is left out
        result["average"] = sum(result.values()) / len(result) if result else math.nan
        self.last_result = result
        for cause, value in result.items():
            name = "val/explanation_acc" if cause == "average" else f"val/explanation_acc/{cause}"
            pl_module.log(name, value, prog_bar=cause == "average", sync_dist=False)
        self._log_table(trainer, mine, texts, correct)

    def _log_table(self, trainer: L.Trainer, records, texts, correct) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers or not trainer.is_global_zero:
            return
        rows = [
            [wandb.Image(to_pil(record.image)), record.cause, record.explanation, text, hit]
            for record, text, hit in list(zip(records, texts, correct))[: self.table_rows]
        ]
        for logger in loggers:
            logger.log_table(
                "val/explanations",
                columns=["image", "cause", "target", "generated", f"correct ({GRADER})"],
                data=rows,
                step=trainer.global_step,
            )
