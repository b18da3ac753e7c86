"""A panel of judges scoring the same explanations: each judge's score kept, their mean the LLM Match.

A judge that fails on an item (a reply still malformed or off the scale after its re-asks) gives ``None``;
:attr:`PanelJudgement.failed` names it and the mean is over the judges that answered. Inside
:func:`~nemo_train.backends.base.strict_json` (every stored evaluation) such a reply raises instead, so the
sample is stored as failed and asked again by the next run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nemo_train.errors import UserInputError
from nemo_train.metrics.nemo import judge_mean

if TYPE_CHECKING:
    from nemo_train.scoring.judges import Judge, JudgeItem

__all__ = ["JudgePanel", "PanelJudgement"]


@dataclass
class PanelJudgement:
    """A panel's verdict on one explanation: each judge's score and their mean (failed judges skipped)."""

    scores: dict[str, float | None]
    reasons: dict[str, str] = field(default_factory=dict)
    groundings: dict[str, float | None] = field(default_factory=dict)

    @property
    def mean(self) -> float | None:
        """The explanation's LLM Match (:func:`~nemo_train.metrics.nemo.judge_mean`); ``None`` when no judge answered."""
        return judge_mean(self.scores.values())

    @property
    def failed(self) -> list[str]:
        """The judges that gave no score (their reason says why: no JSON reply, or an off-scale one)."""
        return [name for name, score in self.scores.items() if score is None]

    @property
    def grounding(self) -> float | None:
        """Mean grounding over the judges that reported one; ``None`` when none did."""
        return judge_mean(self.groundings.values())


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
            PanelJudgement(
                {j.name: 0.0 for j in self.judges},
                {j.name: "empty explanation" for j in self.judges},
                {j.name: None for j in self.judges},
            )
            for _ in items
        ]
        for row, column in zip(asked, zip(*per_judge)):
            out[row] = PanelJudgement(
                scores={j.judge: j.score for j in column},
                reasons={j.judge: j.reason for j in column},
                groundings={j.judge: j.grounding for j in column},
            )
        return out

    def __repr__(self) -> str:
        return f"JudgePanel({self.names})"
