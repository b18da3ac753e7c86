"""CEI and LLM Match of an explainer on fixed sets of classifier errors, after each validation of its fit."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger

from nemo_train.console import print_table
from nemo_train.explainer.distributed import lockstep
from nemo_train.explainer.lockstep import explain_in_lockstep
from nemo_train.metrics.bootstrap import mean_interval
from nemo_train.metrics.nemo import CEI, LLMMatch, score_mean
from nemo_train.models.targets import load_checkpoint_target
from nemo_train.scoring.benchmark import FACT_SHEETS, ErrorSample, build_synthetic_benchmark
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.scoring.judges import GroundedJudge, JudgeItem, JudgePanel
from nemo_train.scoring.labels import match_key, match_label
from nemo_train.scoring.shift_benchmark import build_shift_benchmark
from nemo_train.scoring.structured import DISTILL_PROMPT, StructuredEditDeriver
from nemo_train.scoring.text_edits import TextEditDeriver, reader_for
from nemo_train.vocabulary import BIAS_PROMPT

ExplainFn = Callable[[L.LightningModule, Sequence[ErrorSample], Sequence[str]], list[str]]


def explain_with_module(prompt: str | None = None, max_new_tokens: int = 48, batch_size: int = 16) -> ExplainFn:
    """Greedy explanations from the explainer being trained. ``prompt`` may name ``{true_name}`` and
    ``{pred_name}`` (filled per error, as in the distilled explainer's question); default: the bias question.
    Safe under FSDP / ZeRO-3 with uneven errors per rank (:func:`~nemo_train.explainer.lockstep.explain_in_lockstep`)."""
    question = prompt or BIAS_PROMPT

    def explain(module: L.LightningModule, errors: Sequence[ErrorSample], class_names: Sequence[str]) -> list[str]:
        prompts = [question.format(true_name=class_names[e.label], pred_name=class_names[e.prediction]) for e in errors]
        trainer = getattr(module, "_trainer", None)  # under FSDP / ZeRO-3 ranks generate in lockstep
        images = [e.image for e in errors]
        return explain_in_lockstep(
            trainer, module, images, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size
        )

    return explain


@dataclass
class ErrorSet:
    """Held-out errors of a classifier on a generated benchmark's test grid (disjoint from any mining split).

    ``name`` keys the logged metrics (``nemo/<name>/cei``); the first set of the callback is logged as
    ``nemo/cei``. Every generated benchmark has a fact sheet, so edits are derived from the explanation's sentence
    (:class:`~nemo_train.scoring.text_edits.TextEditDeriver`, a parser, not a model; an ``Edit: ...`` part that agrees
    with the sentence gives the value); ``structured`` chooses, without a sheet, between the ``Edit:`` part (a
    distilled explainer) and the keyword deriver.
    """

    classifier: str
    dataset: Literal["cmnist", "clevr", "shifts"] = "cmnist"
    name: str | None = None
    n: int = 32
    seed: int = 0
    test_styles: int = 2
    bias: str | None = None
    data_kwargs: dict[str, Any] = field(default_factory=dict)
    structured: bool = True

    def build(self) -> tuple[Any, CounterfactualScorer, JudgePanel]:
        target = load_checkpoint_target(self.classifier)
        if self.dataset == "shifts":  # errors with their own causes; bias names the classifier's gap preset
            gaps = self.bias or "gaps_a"
            bench = build_shift_benchmark(target, gaps, n=self.n, seed=self.seed, datamodule_kwargs=self.data_kwargs)
        else:
            bench = build_synthetic_benchmark(
                self.dataset,
                target=target,
                n=self.n,
                seed=self.seed,
                bias=self.bias,
                test_styles=self.test_styles,
                datamodule_kwargs=self.data_kwargs or None,
            )
        editable = bench.cause["editable"]
        reader = reader_for(bench)
        if reader is not None:  # one reading: the sentence's blamed factor, an agreeing Edit: line gives the value
            deriver = TextEditDeriver(reader)
        elif self.structured:
            deriver = StructuredEditDeriver(bench.vocabulary, editable)
        else:
            deriver = KeywordAttributeDeriver(bench.vocabulary, editable)
        scorer = CounterfactualScorer(target, deriver, ExactAttributeEditor(bench.renderer))
        judge = GroundedJudge().for_benchmark(self.dataset, FACT_SHEETS.get(self.dataset))
        return bench, scorer, JudgePanel([judge])


class NemoEvalCallback(L.Callback):
    """After each validation, the module explains fixed error sets; CEI and LLM Match are logged.

    Each explanation goes through the counterfactual test of ``scorer`` (derive, edit, classify) and the
    judges of ``panel``. Logs ``nemo/cei`` (with its bootstrap 95 % interval over the errors, ``nemo/cei_ci_low`` /
    ``nemo/cei_ci_high``), ``nemo/llm_match`` and ``nemo/llm_match/<judge>`` (``rule_match``
    instead of ``llm_match`` when no judge of the panel is a language model, as with the default grounded judge) for the first
    set, ``nemo/<name>/...`` for each further one (e.g. errors of a classifier whose bias the explainer never
    saw: the generalisation report); with a ``WandbLogger`` also a table (image, y, y_hat, explanation, edit,
    edited image, CEI, score, the judges' reason, consistency, cause) per validation. Skipped during the sanity
    check. At the end of the fit a table of every validation's numbers is printed. The errors are split across
    ranks; under FSDP / ZeRO-3 every rank makes the same number of sharded ``generate`` calls, however they split
    (an own ``explain_fn`` is then called on every rank, with an empty list on a rank without errors, and must
    generate in lockstep too: :func:`nemo_train.explainer.lockstep.explain_in_lockstep`).

    Configure either ``errors`` (:class:`ErrorSet` s, built at setup; the shipped presets) or ready
    ``benchmark`` / ``scorer`` / ``panel`` objects (from Python).

    Args:
        errors: held-out error sets; the first is the headline.
        benchmark, scorer, panel: one ready error set (a :class:`~nemo_train.scoring.benchmark.NemoBenchmark`,
            a :class:`~nemo_train.scoring.interventions.CounterfactualScorer`, a :class:`~nemo_train.scoring.judges.JudgePanel`).
        prompt: the question (``{true_name}`` / ``{pred_name}`` filled per error); default: the bias question.
        explain_fn: ``(module, errors, class_names) -> explanations``; default: greedy generation with ``prompt``.
        max_new_tokens: generation length of the default ``explain_fn``.
        every_n_epochs: run after every n-th validation.
        table_rows: rows of the W&B table.
    """

    def __init__(
        self,
        errors: list[ErrorSet] | None = None,
        benchmark: Any = None,
        scorer: Any = None,
        panel: Any = None,
        prompt: str | None = DISTILL_PROMPT,
        explain_fn: ExplainFn | None = None,
        max_new_tokens: int = 64,
        every_n_epochs: int = 1,
        table_rows: int = 32,
    ) -> None:
        if (benchmark is None) == (errors is None) or (benchmark is not None and (scorer is None or panel is None)):
            raise ValueError("NemoEvalCallback needs either errors, or benchmark, scorer and panel")
        self.specs = list(errors or [])
        self.sets: list[tuple[str, Any, Any, Any]] = [("", benchmark, scorer, panel)] if benchmark is not None else []
        self.explain_fn = explain_fn or explain_with_module(prompt, max_new_tokens)
        self.every_n_epochs = max(1, every_n_epochs)
        self.table_rows = table_rows
        self.history: list[dict[str, float]] = []
        self.last_result: dict[str, float] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.sets:
            return
        for i, spec in enumerate(self.specs):
            prefix = "" if i == 0 else f"{spec.name or f'set{i}'}/"
            self.sets.append((prefix, *spec.build()))

    def _evaluate(self, trainer, pl_module, prefix: str, bench, scorer, panel) -> tuple[dict[str, float], list]:
        errors = bench.errors[trainer.global_rank :: trainer.world_size]
        names = bench.class_names
        device = pl_module.device
        cei, llm_match = CEI().to(device), LLMMatch(panel.names).to(device)
        grounding: list[float] = []
        # under FSDP / ZeRO-3 a rank without errors still takes part in the sharded generate calls
        texts = self.explain_fn(pl_module, errors, names) if errors or lockstep(trainer) else []
        rows = []
        reader = reader_for(bench)  # whether the applied edit changes a factor the sentence blames
        for error, text in zip(errors, texts):
            trials = scorer.score(error, [text], names) if text else []
            p_o = trials[0].p_original if trials else 0.0
            p_e = trials[0].p_edited if trials else 0.0
            cei.update(torch.tensor([p_e], device=device), torch.tensor([p_o], device=device))
            item = JudgeItem(
                text,
                names[error.label],
                names[error.prediction],
                attributes=bench.known_attributes(error),
                cause=error.cause,
            )
            verdict = panel.judge([item])[0]
            llm_match.update([[verdict.scores[j] for j in panel.names]])
            if verdict.grounding is not None:
                grounding.append(verdict.grounding)
            trial = trials[0] if trials else None
            reading = reader.read(error, text, names, trial.instruction) if reader and trial else None
            rows.append((error, text, trial, verdict, reading.consistent if reading is not None else None))
        match = match_key(panel.names)  # rule_match when no judge of the panel is a language model
        result = {f"nemo/{prefix}cei": float(cei.compute()), f"nemo/{prefix}{match}": float(llm_match.compute())}
        result.update({f"nemo/{prefix}{match}/{k}": v for k, v in llm_match.per_judge().items()})
        interval = mean_interval(cei.per_sample().tolist())  # over every rank's errors (gathered)
        if interval is not None:  # the headline's bootstrap 95 % interval, logged beside it
            result[f"nemo/{prefix}cei_ci_low"], result[f"nemo/{prefix}cei_ci_high"] = interval
        if grounding:  # mean share of true claims on this rank's errors
            result[f"nemo/{prefix}grounding"] = score_mean(grounding)
        return result, rows

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        result: dict[str, float] = {}
        for prefix, bench, scorer, panel in self.sets:
            numbers, rows = self._evaluate(trainer, pl_module, prefix, bench, scorer, panel)
            result.update(numbers)
            if trainer.is_global_zero:
                self._log_table(trainer, rows, bench.class_names, f"nemo/{prefix}explanations", panel.names)
        self.last_result = result
        self.history.append({"epoch": trainer.current_epoch, **result})
        pl_module.log_dict(result, rank_zero_only=True)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or not self.history:
            return
        keys = [k for k in self.history[-1] if k != "epoch" and k.count("/") <= 2 and "_match/" not in k]
        print_table(
            ["epoch", *keys],
            [[h["epoch"], *(h.get(k) for k in keys)] for h in self.history],
            title="NEMO evaluation of the explainer per validation (held-out errors; CEI in percentage points)",
            caption="rule_match: LLM Match from judges that are not models (default: the grounded judge, an "
            "attribute parser); llm_match: from language-model judges",
            digits=3,
        )

    def _log_table(self, trainer: L.Trainer, rows: list, names: list[str], key: str, judges: list[str]) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers:
            return

        from nemo_train.loggers import wandb_image
        from nemo_train.reports.gallery import reasons_text

        columns = [
            "image",
            "y",
            "y_hat",
            "explanation",
            "edit",
            "edited image",
            "cei",
            match_label(judges),
            "reason",
            "consistent",
            "cause",
        ]
        data = []
        for error, text, trial, verdict, consistent in rows[: self.table_rows]:
            edited = trial.edited_image if trial is not None and trial.edited_image is not None else None
            data.append(
                [
                    wandb_image(error.image),
                    names[error.label],
                    names[error.prediction],
                    text,
                    json.dumps(trial.instruction) if trial is not None else None,
                    wandb_image(edited),
                    trial.cei if trial is not None else 0.0,
                    verdict.mean,
                    reasons_text({"judge_reasons": verdict.reasons}),
                    consistent,
                    error.cause,
                ]
            )
        for lg in loggers:
            lg.log_table(key=key, columns=columns, data=data, step=trainer.global_step)
