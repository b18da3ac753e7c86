"""The reward of the explainer's reinforcement stage: each explanation scored as the evaluation tables score it.

:class:`VerifiedEditReward` is a reward of the explainer's GRPO stage (``nemo_train.explainer.rewards.ExplanationReward``,
a ``class_path`` plug-in of ``nemo_train.explainer.grpo.GRPOModule``; the packages never import each other). Each explanation of an error goes through the tables' scoring
(:class:`~nemo_train.scoring.explanations.ExplanationScorer`): the edit derived from its text is applied to the
error and the error's own classifier reads the edited image (CEI), the judge panel grades it against the error's
cause (LLM Match; the grounded judge by default) and checks its claims (grounding), and an explanation whose text
and edit disagree scores 0 on both headline numbers. The reward is

    reward = (match_weight * llm_match + cei_weight * clip(cei / 100, 0, 1)) * (1 - grounding_weight * (1 - grounding))
             - length_penalty * max(0, words - max_words) / max_words

so a false claim scales down what an explanation earns but true claims alone earn nothing (a sentence that blames
nothing has no CEI and no match), an inconsistent explanation earns nothing but its length penalty, and length is
the one thing penalised that the metrics do not already catch. A text without a checkable claim counts as
grounded (grounding ``nan`` in the parts).

The errors are found again from what the data carries (``classifier`` and ``sample_id``): with ``teacher``, the
folder of a ``nemo-train distill-teacher`` run (its ``provenance.json``), each classifier it labelled and its mined
errors are rebuilt exactly as the teacher mined them, on first use; :meth:`VerifiedEditReward.add` registers a
classifier's errors directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError
from nemo_train.models.specs import as_classifier
from nemo_train.nemo.distill.labelling import mined_errors
from nemo_train.nemo.distill.zoo_members import zoo_members
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.explanations import ExplanationScore, ExplanationScorer
from nemo_train.scoring.judges import Judge

#: The parts of each reward, in the order they are logged.
PARTS = ("llm_match", "cei", "grounding", "consistent", "words", "length_penalty")


@dataclass(frozen=True)
class RewardWeights:
    """How the scores of one explanation make its reward (see the module).

    Args:
        match_weight: weight of the headline LLM Match (0 / 0.5 / 1).
        cei_weight: weight of the headline CEI, as a fraction of 100 points (negative CEI counts as 0).
        grounding_weight: share of the reward a fully ungrounded explanation loses (0: grounding ignored).
        max_words: answers longer than this many words pay the length penalty.
        length_penalty: penalty per ``max_words`` words beyond ``max_words``.
    """

    match_weight: float = 0.5
    cei_weight: float = 0.5
    grounding_weight: float = 0.5
    max_words: int = 40
    length_penalty: float = 0.5

    def __post_init__(self) -> None:
        if min(self.match_weight, self.cei_weight, self.length_penalty) < 0 or self.max_words < 1:
            raise UserInputError(f"reward weights {self}; expected weights >= 0 and max_words >= 1")
        if not 0 <= self.grounding_weight <= 1:
            raise UserInputError(f"grounding_weight={self.grounding_weight}; expected a value in [0, 1]")

    def reward(self, score: ExplanationScore) -> dict[str, float]:
        """The reward of one scored explanation and its parts."""
        match = float(score.llm_match or 0.0)
        cei = min(max(float(score.cei) / 100.0, 0.0), 1.0)
        grounding = math.nan if score.grounding is None else min(max(float(score.grounding), 0.0), 1.0)
        truth = 1.0 if math.isnan(grounding) else 1.0 - self.grounding_weight * (1.0 - grounding)
        quality = (self.match_weight * match + self.cei_weight * cei) * truth
        if score.consistent is False:  # the headline numbers are 0 already; nothing else may pay either
            quality = 0.0
        words = len(score.text.split())
        penalty = self.length_penalty * max(0, words - self.max_words) / self.max_words
        consistent = math.nan if score.consistent is None else float(score.consistent)
        return {
            "reward": quality - penalty,
            "llm_match": match,
            "cei": float(score.cei),
            "grounding": grounding,
            "consistent": consistent,
            "words": float(words),
            "length_penalty": penalty,
        }


@dataclass
class _Classifier:
    """One classifier's errors (by id) and the scoring of explanations of them."""

    errors: dict[str, ErrorSample]
    scoring: ExplanationScorer


class VerifiedEditReward:
    """The tables' scoring of each explanation on its error's own classifier, as one reward (see the module).

    Args:
        teacher: a ``distill-teacher`` output folder: the classifiers it labelled and their mined errors are rebuilt
            from its ``provenance.json`` on first use (``None``: only what :meth:`add` registers).
        weights: how the scores make the reward (:class:`RewardWeights`).
        judges: the judge panel (default: the grounded judge, an attribute parser, not a model).
        device: where the classifiers run.
    """

    def __init__(
        self,
        teacher: str | None = None,
        weights: RewardWeights | None = None,
        judges: list[Judge] | None = None,
        device: str = "cpu",
    ) -> None:
        self.teacher, self.weights, self.judges, self.device = teacher, weights or RewardWeights(), judges, device
        self._classifiers: dict[str, _Classifier] = {}
        self._loaded = teacher is None

    def add(self, name: str, benchmark: NemoBenchmark, target) -> None:
        """Register ``target``'s errors (``benchmark.errors``) under the classifier name ``name``."""
        scoring = ExplanationScorer.build(benchmark, target, judges=self.judges)
        self._classifiers[name] = _Classifier({s.sample_id: s for s in benchmark.errors}, scoring)

    def __call__(
        self, errors: Sequence[Mapping[str, Any]], texts: Sequence[str]
    ) -> tuple[list[float], dict[str, list[float]]]:
        """One reward per text (``texts[i]`` explains ``errors[i]``: its ``classifier`` and ``sample_id``) and its
        parts (:data:`PARTS`)."""
        if len(errors) != len(texts):
            raise UserInputError(f"{len(texts)} explanations for {len(errors)} errors; expected one per error")
        self.load()
        found = [self._find(error) for error in errors]
        rows: list[dict[str, float] | None] = [None] * len(texts)
        by_classifier: dict[str, list[int]] = {}
        for i, (name, _) in enumerate(found):
            by_classifier.setdefault(name, []).append(i)
        for name, members in by_classifier.items():
            scoring = self._classifiers[name].scoring
            scores = scoring.score([found[i][1] for i in members], [texts[i] for i in members])
            for i, score in zip(members, scores):
                rows[i] = self.weights.reward(score)
        return [r["reward"] for r in rows], {part: [r[part] for r in rows] for part in PARTS}

    def _find(self, error: Mapping[str, Any]) -> tuple[str, ErrorSample]:
        name, sample_id = str(error.get("classifier")), str(error.get("sample_id"))
        known = self._classifiers.get(name)
        if known is None:
            raise UserInputError(
                f"no classifier {name!r} to score error {sample_id!r}; known: {sorted(self._classifiers)}"
            )
        sample = known.errors.get(sample_id)
        if sample is None:
            raise UserInputError(
                f"classifier {name!r} has no mined error {sample_id!r}; were the pairs written by this teacher?"
            )
        for key in ("label", "prediction"):
            if error.get(key) is not None and int(error[key]) != getattr(sample, key):
                raise UserInputError(
                    f"error {sample_id!r} of {name!r}: the data says {key} {error[key]}, the re-mined error "
                    f"{getattr(sample, key)}; the teacher folder no longer matches its pairs"
                )
        return name, sample

    def load(self) -> None:
        """Rebuild the teacher's classifiers and mined errors (once; the first call does it otherwise)."""
        if self._loaded:
            return
        settings = teacher_settings(self.teacher)
        dataset = settings.get("dataset", "cmnist")
        if dataset == "folder":
            raise UserInputError("the verified-edit reward re-renders edits: it needs a generated dataset's teacher")
        members = [(as_classifier(settings["classifier"]), settings.get("bias"))] if settings.get("classifier") else []
        for entry in settings.get("pool") or []:
            entry = entry.get("init_args", entry)  # a PoolClassifier as the provenance writes objects
            members.append((as_classifier(entry["classifier"]), entry.get("bias")))
        if settings.get("zoo"):
            members += [(m.spec, m.gaps) for m in zoo_members(settings["zoo"], settings.get("zoo_split", "train"))]
        if not members:
            raise UserInputError(f"the teacher at {self.teacher!r} names no classifier")
        for spec, bias in members:
            spec.check()
            target, bench = mined_errors(spec, bias, dataset, int(settings.get("n", 300)), int(settings["seed"]),
                                   int(settings.get("styles", 2)), settings.get("data_kwargs"), self.device,
                                   None, None, None)  # fmt: skip
            self.add(spec.label, bench, target)
        self._loaded = True


def teacher_settings(folder: str | Path) -> dict[str, Any]:
    """The settings of the ``distill-teacher`` run that wrote ``folder`` (its ``provenance.json``), with its seed."""
    path = Path(folder) / "provenance.json"
    if not path.is_file():
        raise UserInputError(
            f"no teacher run at {str(folder)!r} (no provenance.json); run nemo-train distill-teacher --config "
            "configs/distill/zoo_teacher.yaml first"
        )
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path} is not a readable provenance record: {err}") from None
    if record.get("command") != "distill-teacher":
        raise UserInputError(f"{path} records a {record.get('command')!r} run; expected distill-teacher")
    settings = dict(record.get("settings") or {})
    settings.setdefault("seed", (record.get("run") or {}).get("seed", 1))
    return settings
