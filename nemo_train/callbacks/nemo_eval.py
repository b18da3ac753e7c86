"""CEI and LLM Match of an explainer on a fixed set of classifier errors, after each validation of its fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger

from nemo_train.metrics.nemo import CEI, LLMMatch

ExplainFn = Callable[[L.LightningModule, Sequence[torch.Tensor]], list[str]]


def explain_with_module(prompt: str | None = None, max_new_tokens: int = 48, batch_size: int = 16) -> ExplainFn:
    """Greedy explanations from the explainer being trained (``generate_explanations``, issue 4)."""

    def explain(module: L.LightningModule, images: Sequence[torch.Tensor]) -> list[str]:
        from nemo_train.explainer.generation import generate_explanations
        from nemo_train.vocabulary import BIAS_PROMPT

        out = generate_explanations(
            module, list(images), prompts=prompt or BIAS_PROMPT, max_new_tokens=max_new_tokens, batch_size=batch_size
        )
        return [samples[0] for samples in out]

    return explain


class NemoEvalCallback(L.Callback):
    """After each validation, the module explains a fixed error set; CEI and LLM Match are logged.

    Each explanation goes through the counterfactual test of ``scorer`` (derive, edit, classify) and the
    judges of ``panel``. Logs ``nemo/cei``, ``nemo/llm_match`` and ``nemo/llm_match/<judge>``; with a
    ``WandbLogger`` attached also a table (image, y, y_hat, explanation, edit, edited image, CEI, score).
    Skipped during the sanity check. The error set is split across ranks; the metrics are summed.

    Args:
        benchmark: the fixed errors (e.g. ``build_cmnist_benchmark(checkpoint, n=32)``) and class names.
        scorer: a :class:`~nemo_train.nemo.interventions.CounterfactualScorer` for the benchmark's target.
        panel: a :class:`~nemo_train.nemo.judges.JudgePanel`.
        explain_fn: ``(module, images) -> explanations``; default: greedy generation of the explainer.
        every_n_epochs: run after every n-th validation.
        table_rows: rows of the W&B table.
    """

    def __init__(
        self,
        benchmark,
        scorer,
        panel,
        explain_fn: ExplainFn | None = None,
        every_n_epochs: int = 1,
        table_rows: int = 32,
    ) -> None:
        self.benchmark, self.scorer, self.panel = benchmark, scorer, panel
        self.explain_fn = explain_fn or explain_with_module()
        self.every_n_epochs = max(1, every_n_epochs)
        self.table_rows = table_rows
        self.cei = CEI()
        self.llm_match = LLMMatch(panel.names)
        self.last_result: dict[str, float] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        from nemo_train.nemo.judges import JudgeItem

        errors = self.benchmark.errors[trainer.global_rank :: trainer.world_size]
        names = self.benchmark.class_names
        self.cei, self.llm_match = self.cei.to(pl_module.device), self.llm_match.to(pl_module.device)
        texts = self.explain_fn(pl_module, [e.image for e in errors]) if errors else []
        rows = []
        for error, text in zip(errors, texts):
            trials = self.scorer.score(error, [text], names) if text else []
            p_o = trials[0].p_original if trials else 0.0
            p_e = trials[0].p_edited if trials else 0.0
            self.cei.update(torch.tensor([p_e], device=pl_module.device), torch.tensor([p_o], device=pl_module.device))
            verdict = self.panel.judge([JudgeItem(text, names[error.label], names[error.prediction])])[0]
            self.llm_match.update([[verdict.scores[j] for j in self.panel.names]])
            rows.append((error, text, trials[0] if trials else None, verdict))
        result = {"nemo/cei": float(self.cei.compute()), "nemo/llm_match": float(self.llm_match.compute())}
        result.update({f"nemo/llm_match/{k}": v for k, v in self.llm_match.per_judge().items()})
        self.cei.reset()
        self.llm_match.reset()
        self.last_result = result
        pl_module.log_dict(result, rank_zero_only=True)
        if trainer.is_global_zero:
            self._log_table(trainer, rows, names)

    def _log_table(self, trainer: L.Trainer, rows: list, names: list[str]) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers:
            return
        import json

        import wandb

        columns = ["image", "y", "y_hat", "explanation", "edit", "edited image", "cei", "llm_match"]
        data = []
        for error, text, trial, verdict in rows[: self.table_rows]:
            edited = trial.edited_image if trial is not None and trial.edited_image is not None else None
            data.append(
                [
                    wandb.Image(error.image.permute(1, 2, 0).cpu().numpy()),
                    names[error.label],
                    names[error.prediction],
                    text,
                    json.dumps(trial.instruction) if trial is not None else None,
                    wandb.Image(edited.permute(1, 2, 0).cpu().numpy()) if edited is not None else None,
                    trial.cei if trial is not None else 0.0,
                    verdict.mean,
                ]
            )
        for lg in loggers:
            lg.log_table(key="nemo/explanations", columns=columns, data=data, step=trainer.global_step)
