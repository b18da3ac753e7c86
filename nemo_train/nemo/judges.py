"""Judges that score whether an explanation names a benchmark's failure factor: 1, 0.5 or 0.

Each benchmark varies along a known factor (NEMO Sec. 4.1.2), written down as a
:class:`FactorCriterion`. :class:`LLMJudge` asks a chat model to grade an explanation against it;
:class:`KeywordJudge` is an offline stand-in that only suits closed-vocabulary synthetic
benchmarks; :class:`JudgePanel` averages several judges and keeps each one's score.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from nemo_train.backends.base import ChatBackend
from nemo_train.backends.messages import system_message, user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo.criteria import CRITERIA, FactorCriterion, get_criterion

__all__ = ["CRITERIA", "FactorCriterion", "Judge", "JudgePanel", "KeywordJudge", "LLMJudge", "get_criterion"]

#: Benchmarks with a written-down criterion (a judge's ``criterion`` option)
CriterionName = Literal["imagenet_r", "objectnet", "imagenet_d", "cmnist", "clevr"]

SCORES = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Judgement:
    """One judge's score of one explanation: 1, 0.5, 0, or ``None`` when the judge failed to answer."""

    judge: str
    score: float | None
    reason: str = ""


@dataclass(frozen=True)
class JudgeItem:
    """What a judge sees: the explanation, and the true and predicted class names."""

    explanation: str
    true_label: str = ""
    predicted_label: str = ""


class Judge(ABC):
    """Scores explanations against a :class:`FactorCriterion`: ``judge(items) -> list[Judgement]``.

    ``criterion=None`` (the usual configuration) takes the evaluated benchmark's criterion when the
    pipeline calls :meth:`for_benchmark`.
    """

    name: str
    criterion: FactorCriterion | None = None

    @abstractmethod
    def judge(self, items: list[JudgeItem]) -> list[Judgement]: ...

    def for_benchmark(self, benchmark: str) -> Judge:
        """Set the criterion from the benchmark's name unless one was configured; returns ``self``."""
        if self.criterion is None:
            self._set_criterion(get_criterion(benchmark))
        return self

    def _set_criterion(self, criterion: FactorCriterion) -> None:
        self.criterion = criterion

    def _require_criterion(self) -> FactorCriterion:
        if self.criterion is None:
            raise UserInputError(f"judge {self.name!r} has no criterion; pass one or call for_benchmark()")
        return self.criterion

    def fingerprint(self) -> dict[str, Any]:
        """What changes this judge's scores (for result fingerprints): its class, name and criterion."""
        return {"class": type(self).__name__, "name": self.name, "criterion": getattr(self.criterion, "name", None)}


def snap_score(value: Any) -> float | None:
    """A judge's raw score as 0.0 / 0.5 / 1.0, or ``None`` if it is not one of them."""
    if isinstance(value, str):
        word = value.strip().lower()
        words = {"full": 1.0, "partial": 0.5, "none": 0.0, "no": 0.0}
        if word in words:
            return words[word]
        try:
            value = float(word)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        return None
    value = float(value)
    return value if value in SCORES else None


JUDGE_SYSTEM = (
    "You grade explanations of image-classifier mistakes. You decide whether an explanation names one "
    "given cause of failure. You answer with a single JSON object and nothing else."
)

JUDGE_PROMPT = """A vision classifier labelled an image of a "{true_label}" as "{predicted_label}". Someone wrote this explanation of the mistake:

<explanation>
{explanation}
</explanation>

The images of this benchmark differ from ordinary photos in one known way, which is the real cause of the error:
{factor}

Grade how well the explanation names that cause:
- 1 if it clearly names the cause (the factor itself or a specific value of it),
- 0.5 if it hints at the cause only partly or vaguely, or names it among several unrelated causes without committing,
- 0 if it does not mention the cause at all.
Judge only whether the cause is named, not the writing quality or the rest of the explanation.

Reply with JSON only: {{"reasoning": "<one sentence>", "score": <1, 0.5 or 0>}}"""


class LLMJudge(Judge):
    """A chat model grading explanations against a dataset's :class:`FactorCriterion` (JSON reply).

    Replies are requested at temperature 0 (as in NEMO App. B.2). A reply that stays malformed
    after the backend's re-asks, or whose score is not 1 / 0.5 / 0, gives ``score=None``.
    """

    def __init__(
        self,
        backend: ChatBackend,
        criterion: CriterionName | FactorCriterion | None = None,
        name: str | None = None,
        max_tokens: int = 256,
        max_reasks: int = 2,
    ) -> None:
        self.backend = backend
        self.criterion = None if criterion is None else get_criterion(criterion)
        self.name = name or f"llm:{backend.model}"
        self.max_tokens = max_tokens
        self.max_reasks = max_reasks

    def messages(self, item: JudgeItem) -> list[dict[str, Any]]:
        """The chat messages sent for one item."""
        prompt = JUDGE_PROMPT.format(
            true_label=item.true_label or "unknown class",
            predicted_label=item.predicted_label or "another class",
            explanation=item.explanation.strip(),
            factor=f"{self._require_criterion().name}: {self.criterion.description}.",
        )
        return [system_message(JUDGE_SYSTEM), user_message(prompt)]

    def judge(self, items: list[JudgeItem]) -> list[Judgement]:
        """Score each item (requests run ``backend.concurrency`` at a time)."""
        replies = self.backend.chat_json_batch(
            [self.messages(item) for item in items],
            n=1,
            temperature=0.0,
            max_tokens=self.max_tokens,
            max_reasks=self.max_reasks,
        )
        out = []
        for (reply,) in replies:
            if reply is None:
                out.append(Judgement(self.name, None, "no JSON reply"))
            else:
                out.append(Judgement(self.name, snap_score(reply.get("score")), str(reply.get("reasoning", ""))))
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "backend": self.backend.fingerprint(), "max_tokens": self.max_tokens}

    def __repr__(self) -> str:
        return f"LLMJudge(backend={self.backend!r}, criterion={getattr(self.criterion, 'name', None)!r})"


class KeywordJudge(Judge):
    """Offline judge for CLOSED-VOCABULARY SYNTHETIC benchmarks only (CMNIST colours, CLEVR materials).

    It looks for the factor's words and synonyms (whole words, any case): 1 if one of
    ``criterion.keywords`` appears, 0.5 if only one of ``criterion.partial_keywords`` does, else 0.
    It does not read meaning (negations such as "not the colour" still match), so its scores are
    only meaningful where the factor has a small, known vocabulary; use :class:`LLMJudge` for real
    benchmarks. Its name says so in every table it appears in.
    """

    def __init__(
        self,
        criterion: CriterionName | FactorCriterion | None = None,
        name: str = "keyword-judge (closed-vocabulary synthetic only)",
    ) -> None:
        self.name = name
        self.criterion = None
        if criterion is not None:
            self._set_criterion(get_criterion(criterion))

    def _set_criterion(self, criterion: FactorCriterion) -> None:
        if not criterion.keywords:
            raise UserInputError(f"criterion {criterion.name!r} has no keywords; KeywordJudge needs a vocabulary")
        self.criterion = criterion
        self._full = self._pattern(criterion.keywords)
        self._partial = self._pattern(criterion.partial_keywords) if criterion.partial_keywords else None

    @staticmethod
    def _pattern(words: tuple[str, ...]) -> re.Pattern[str]:
        alternatives = sorted((re.escape(w).replace(r"\ ", r"\s+") for w in words), key=len, reverse=True)
        return re.compile(r"(?<![\w-])(?:" + "|".join(alternatives) + r")(?![\w-])", re.IGNORECASE)

    def score_text(self, explanation: str) -> Judgement:
        """Score one explanation."""
        self._require_criterion()
        hit = self._full.search(explanation or "")
        if hit:
            return Judgement(self.name, 1.0, f"names the {self.criterion.name}: {hit.group(0)!r}")
        hit = self._partial.search(explanation or "") if self._partial else None
        if hit:
            return Judgement(self.name, 0.5, f"only hints at the {self.criterion.name}: {hit.group(0)!r}")
        return Judgement(self.name, 0.0, f"does not mention the {self.criterion.name}")

    def judge(self, items: list[JudgeItem]) -> list[Judgement]:
        """Score each item."""
        return [self.score_text(item.explanation) for item in items]

    def __repr__(self) -> str:
        return f"KeywordJudge(criterion={getattr(self.criterion, 'name', None)!r})"


@dataclass
class PanelJudgement:
    """A panel's verdict on one explanation: each judge's score and their mean (failed judges skipped)."""

    scores: dict[str, float | None]
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def mean(self) -> float | None:
        valid = [s for s in self.scores.values() if s is not None]
        return sum(valid) / len(valid) if valid else None


class JudgePanel:
    """Several judges scoring the same explanations; the mean over judges reduces single-judge bias."""

    def __init__(self, judges: list[Judge]) -> None:
        if not judges:
            raise UserInputError("an empty judge panel; expected at least one judge")
        names = [j.name for j in judges]
        if len(set(names)) != len(names):
            raise UserInputError(f"judge names {names} repeat; expected distinct names")
        self.judges = list(judges)

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.judges]

    def judge(self, items: list[JudgeItem]) -> list[PanelJudgement]:
        """Every judge scores every item; an empty explanation names no cause: 0 from every judge, unasked."""
        asked = [i for i, item in enumerate(items) if item.explanation.strip()]
        per_judge = [judge.judge([items[i] for i in asked]) if asked else [] for judge in self.judges]
        out = [
            PanelJudgement({j.name: 0.0 for j in self.judges}, {j.name: "empty explanation" for j in self.judges})
            for _ in items
        ]
        for row, column in zip(asked, zip(*per_judge)):
            out[row] = PanelJudgement(
                scores={j.judge: j.score for j in column}, reasons={j.judge: j.reason for j in column}
            )
        return out

    def __repr__(self) -> str:
        return f"JudgePanel({self.names})"
