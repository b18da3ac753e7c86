"""Held-out accuracy of the shifts student, per part of its answer: captions (stage 1) and structured
explanations (stage 2)."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torchmetrics import MeanMetric, MetricCollection

from datamodules.explanations import ExplanationRecord
from datamodules.explanations.caption_pairs import CaptionFacts, caption_references, facts_named, parse_caption
from datamodules.explanations.shift_pairs import answer_fields, score_answer
from nemo_train.explainer.lockstep import answer_held_out
from nemo_train.metrics.means import present_means


class _HeldOutAccuracy(L.Callback):
    """After each validation, answers the datamodule's held-out pairs greedily and logs the mean of each grade
    (:meth:`grade`) as ``val/<metric>/<grade>`` and the headline (:meth:`headline`) as ``val/<metric>``.

    Skipped during the sanity check; under DDP each rank answers its share and the means are reduced across
    ranks (torchmetrics ``MeanMetric``); under FSDP / ZeRO-3 every rank makes the same number of sharded
    ``generate`` calls however the pairs split. The datamodule must expose ``val_records``.
    """

    metric = "accuracy"
    grades: tuple[str, ...] = ()

    def __init__(
        self, every_n_epochs: int = 1, max_samples: int | None = None, max_new_tokens: int = 40, batch_size: int = 32
    ) -> None:
        self.every_n_epochs = max(1, every_n_epochs)
        self.max_samples = max_samples
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.accuracy = MetricCollection({g: MeanMetric() for g in self.grades}, compute_groups=False)
        self.last_result: dict[str, float] = {}

    def usable(self, records: Sequence[ExplanationRecord]) -> list[ExplanationRecord]:
        """The held-out records this metric can grade."""
        return list(records)

    def grade(self, record: ExplanationRecord, text: str) -> dict[str, bool]:
        raise NotImplementedError

    def headline(self, result: dict[str, float]) -> float:
        raise NotImplementedError

    def computed(self) -> dict[str, float]:
        """Each grade's mean over the graded answers (a grade no answer had is left out), then reset."""
        return present_means(self.accuracy)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        records = self.usable(getattr(trainer.datamodule, "val_records", []))
        records = records[: self.max_samples] if self.max_samples else records
        if not records:
            return
        mine = records[trainer.global_rank :: trainer.world_size]
        # as trained (the evidence montage beside the error); under FSDP / ZeRO-3 in lockstep across ranks
        texts = answer_held_out(trainer, pl_module, mine, self.max_new_tokens, self.batch_size)
        self.accuracy = self.accuracy.to(pl_module.device)
        for record, text in zip(mine, texts):
            for name, hit in self.grade(record, text).items():
                self.accuracy[name].update(torch.tensor(float(hit), device=pl_module.device))
        result = self.computed()
        result["average"] = self.headline(result)
        self.last_result = result
        for name, value in result.items():
            key = f"val/{self.metric}" if name == "average" else f"val/{self.metric}/{name}"
            pl_module.log(key, value, prog_bar=name == "average", sync_dist=False)


class CaptionAccuracyCallback(_HeldOutAccuracy):
    """Held-out caption accuracy per factor of a generator's fact sheet.

    A factor of a generated caption is right when it states the reference caption's value of it
    (:func:`datamodules.explanations.caption_pairs.parse_caption`). Logs ``val/caption_acc`` (the mean over the
    factors) and ``val/caption_acc/<factor>`` (the class attribute too, outside the mean), also kept in
    :attr:`last_result`. Only held-out pairs whose answer is a caption of the fact sheet are scored.

    Args:
        facts: the generator whose fact sheet the captions follow.
        every_n_epochs: run after every n-th validation.
        max_samples: caption at most this many held-out images (all by default).
        max_new_tokens, batch_size: generation settings.
    """

    metric = "caption_acc"

    def __init__(
        self,
        facts: CaptionFacts = "shifts",
        every_n_epochs: int = 1,
        max_samples: int | None = None,
        max_new_tokens: int = 40,
        batch_size: int = 32,
    ) -> None:
        self.facts = facts_named(facts)
        self.grades = (self.facts.class_attribute, *(f.name for f in self.facts.factors))
        super().__init__(every_n_epochs, max_samples, max_new_tokens, batch_size)

    def usable(self, records: Sequence[ExplanationRecord]) -> list[ExplanationRecord]:
        return caption_references(records, self.facts)

    def grade(self, record: ExplanationRecord, text: str) -> dict[str, bool]:
        said, truth = parse_caption(text, self.facts), parse_caption(record.explanation or "", self.facts)
        return {name: said[name] == truth[name] for name in self.grades}

    def headline(self, result: dict[str, float]) -> float:
        factors = [f.name for f in self.facts.factors]
        return sum(result[f] for f in factors) / len(factors)


class AnswerAccuracyCallback(_HeldOutAccuracy):
    """Held-out accuracy of structured explanations (``The classifier read this 3 as a 8 because of the dotted
    style. Edit: style -> solid``) against the reference answers, part by part
    (:func:`datamodules.explanations.shift_pairs.score_answer`).

    Logs ``val/answer_acc`` (all of factor, value and classes right) and ``val/answer_acc/<grade>`` for
    ``factor``, ``value``, ``classes`` and ``exact``. A reference that names no value (the teacher's ``factor`` or
    ``cause`` claims: ``The classifier erred because of its style. Edit: style -> solid``) is graded on the factor
    (its edit's attribute) and the exact text only, and over such pairs ``val/answer_acc`` is the factor's
    accuracy. Only held-out pairs whose reference is a structured answer with an attribute edit are scored.

    Args:
        every_n_epochs: run after every n-th validation.
        max_samples: answer at most this many held-out pairs (all by default).
        max_new_tokens, batch_size: generation settings.
    """

    metric = "answer_acc"
    grades = ("factor", "value", "classes", "all", "exact")

    def usable(self, records: Sequence[ExplanationRecord]) -> list[ExplanationRecord]:
        return [r for r in records if answer_fields(r.explanation or "")["factor"] is not None]

    def grade(self, record: ExplanationRecord, text: str) -> dict[str, bool]:
        reference = record.explanation or ""
        if answer_fields(reference)["value"] is not None:
            return score_answer(text, reference)
        said = answer_fields(text)["factor"]
        return {"factor": said == answer_fields(reference)["factor"], "exact": text.strip() == reference.strip()}

    def headline(self, result: dict[str, float]) -> float:
        return result.pop("all") if "all" in result else result["factor"]
