"""Explanation accuracy of an MLLM explainer on held-out pairs, per cause (paper 004, Tables 3-4)."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from torchmetrics.classification import MulticlassStatScores

from datamodules.six_causes import CAUSES


class ExplanationAccuracyCallback(L.Callback):
    """After each validation, explains the datamodule's held-out pairs greedily and scores them.

    An explanation is correct when it names the pair's true cause and no other cause
    (:func:`nemo_train.explainer.causes.is_correct`). Logs ``val/explanation_acc`` (mean over the causes
    present, 004's "Average") and ``val/explanation_acc/<cause>``; with a ``WandbLogger`` attached, also
    a table of (image, cause, target, generated, correct). Skipped during the sanity check. Under DDP each
    rank explains its share and the counts are summed. The datamodule must expose ``val_records`` (see
    :class:`datamodules.explanations.ExplanationDataModule`).

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
        # one extra class for "names no single cause"
        self.stats = MulticlassStatScores(num_classes=len(self.causes) + 1, average=None)
        self.last_result: dict[str, float] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        from nemo_train.explainer.causes import predicted_cause
        from nemo_train.explainer.generation import _question, generate_explanations

        records = [r for r in getattr(trainer.datamodule, "val_records", []) if r.cause in self.causes]
        records = records[: self.max_samples] if self.max_samples else records
        if not records:
            return
        mine = records[trainer.global_rank :: trainer.world_size]
        use_cf = bool((pl_module.prompting or {}).get("use_counterfactual"))
        texts = (
            [
                s[0]
                for s in generate_explanations(
                    pl_module,
                    [r.image for r in mine],
                    prompts=[_question(pl_module, r, use_cf, None) for r in mine],
                    counterfactuals=[r.counterfactual for r in mine]
                    if use_cf and all(r.counterfactual for r in mine)
                    else None,
                    max_new_tokens=self.max_new_tokens,
                    batch_size=self.batch_size,
                )
            ]
            if mine
            else []
        )
        none = len(self.causes)
        predicted = [self.causes.index(c) if (c := predicted_cause(t, self.causes)) else none for t in texts]
        target = [self.causes.index(r.cause) for r in mine]
        self.stats = self.stats.to(pl_module.device)
        if mine:
            self.stats.update(
                torch.tensor(predicted, device=pl_module.device), torch.tensor(target, device=pl_module.device)
            )
        scores = self.stats.compute()  # [classes, (tp, fp, tn, fn, support)], summed over ranks
        self.stats.reset()
        result: dict[str, float] = {}
        for i, cause in enumerate(self.causes):
            support = float(scores[i, 4])
            if support > 0:
                result[cause] = float(scores[i, 0]) / support
        result["average"] = sum(result.values()) / len(result) if result else float("nan")
        self.last_result = result
        for cause, value in result.items():
            name = "val/explanation_acc" if cause == "average" else f"val/explanation_acc/{cause}"
            pl_module.log(name, value, prog_bar=cause == "average", sync_dist=False)
        self._log_table(trainer, mine, texts, predicted, target)

    def _log_table(self, trainer: L.Trainer, records, texts, predicted, target) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers or not trainer.is_global_zero:
            return
        import wandb

        from datamodules.explanations import to_pil

        rows = []
        for record, text, p, t in list(zip(records, texts, predicted, target))[: self.table_rows]:
            rows.append([wandb.Image(to_pil(record.image)), record.cause, record.explanation, text, p == t])
        for logger in loggers:
            logger.log_table(
                "val/explanations",
                columns=["image", "cause", "target", "generated", "correct"],
                data=rows,
                step=trainer.global_step,
            )
