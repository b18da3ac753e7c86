"""Judges that score whether an explanation names a benchmark's failure factor: 1, 0.5 or 0.

Each benchmark varies along a known factor (NEMO Sec. 4.1.2), written down as a
:class:`FactorCriterion`. :class:`LLMJudge` asks a chat model to grade an explanation against it;
:class:`KeywordJudge` is an offline stand-in that only suits closed-vocabulary synthetic
benchmarks; :class:`JudgePanel` averages several judges and keeps each one's score.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nemo_train.backends.base import ChatBackend
from nemo_train.backends.messages import system_message, user_message
from nemo_train.errors import UserInputError

SCORES = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class FactorCriterion:
    """The failure factor of one benchmark.

    ``description`` is what an LLM judge reads. ``keywords`` (the factor and its values, with
    synonyms) and ``partial_keywords`` (vaguer words that only touch the factor) drive the offline
    :class:`KeywordJudge`.
    """

    name: str
    description: str
    keywords: tuple[str, ...] = ()
    partial_keywords: tuple[str, ...] = ()


_COLOUR_WORDS = (
    "colour",
    "color",
    "colours",
    "colors",
    "coloured",
    "colored",
    "colouring",
    "coloring",
    "hue",
    "hues",
    "red",
    "reddish",
    "green",
    "greenish",
    "blue",
    "bluish",
    "yellow",
    "yellowish",
    "orange",
    "purple",
    "violet",
    "magenta",
    "pink",
    "cyan",
    "teal",
    "brown",
    "grey",
    "gray",
    "white",
    "black",
    "turquoise",
    "lime",
    "olive",
    "navy",
    "crimson",
    "scarlet",
)

CRITERIA: dict[str, FactorCriterion] = {
    "imagenet_r": FactorCriterion(
        name="rendition style",
        description=(
            "the artistic style or rendition of the image: that the object is shown as a painting, "
            "sketch, drawing, cartoon, graffiti, embroidery, origami, sculpture, toy, tattoo, video-game "
            "render or other non-photographic depiction, rather than as a real photograph"
        ),
        keywords=(
            "style",
            "rendition",
            "painting",
            "painted",
            "sketch",
            "drawing",
            "drawn",
            "cartoon",
            "graffiti",
            "embroidery",
            "origami",
            "sculpture",
            "toy",
            "tattoo",
            "artistic",
            "illustration",
            "video game",
            "plush",
            "stylized",
            "stylised",
            "art",
        ),
        partial_keywords=("texture", "simplified", "abstract", "unrealistic", "colors", "colours"),
    ),
    "objectnet": FactorCriterion(
        name="viewpoint, rotation or background",
        description=(
            "an unusual viewpoint, rotation or pose of the object (upside down, on its side, seen from "
            "above or behind) or an unusual background or setting for it"
        ),
        keywords=(
            "viewpoint",
            "view",
            "angle",
            "rotation",
            "rotated",
            "upside down",
            "sideways",
            "on its side",
            "pose",
            "orientation",
            "oriented",
            "tilted",
            "background",
            "setting",
            "perspective",
        ),
        partial_keywords=("context", "position", "placement", "surroundings", "cluttered", "scene"),
    ),
    "imagenet_d": FactorCriterion(
        name="background, texture or material",
        description=(
            "the background the object is placed in, or the texture or material the object is made of "
            "(for example a wooden, plastic, glass or woven version of the object)"
        ),
        keywords=(
            "background",
            "texture",
            "textured",
            "material",
            "made of",
            "wooden",
            "wood",
            "plastic",
            "glass",
            "metal",
            "metallic",
            "woven",
            "fabric",
            "stone",
            "paper",
            "surface pattern",
        ),
        partial_keywords=("surface", "appearance", "pattern", "setting", "context", "finish"),
    ),
    "cmnist": FactorCriterion(
        name="colour",
        description=(
            "the colour of the digit: that the classifier relied on the digit's colour (a colour typical "
            "of another class) rather than on its shape"
        ),
        keywords=_COLOUR_WORDS,
        partial_keywords=("tint", "shade", "brightness", "bright", "dark", "appearance"),
    ),
    "clevr": FactorCriterion(
        name="material",
        description=(
            "the material of the object: metal versus rubber, i.e. a shiny, reflective metallic surface "
            "versus a matte one"
        ),
        keywords=(
            "material",
            "materials",
            "metal",
            "metallic",
            "rubber",
            "shiny",
            "matte",
            "reflective",
            "reflection",
            "reflections",
            "glossy",
            "specular",
        ),
        partial_keywords=("surface", "texture", "finish", "lighting", "appearance"),
    ),
}


def get_criterion(name: str | FactorCriterion) -> FactorCriterion:
    """A criterion by dataset name (``imagenet_r``, ``objectnet``, ``imagenet_d``, ``cmnist``, ``clevr``)."""
    if isinstance(name, FactorCriterion):
        return name
    key = str(name).lower().replace("-", "_")
    if key not in CRITERIA:
        raise UserInputError(f"unknown judge criterion {name!r}; expected one of {sorted(CRITERIA)}")
    return CRITERIA[key]


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


@runtime_checkable
class Judge(Protocol):
    """Anything with a ``name`` and ``judge(items) -> list[Judgement]``."""

    name: str

    def judge(self, items: list[JudgeItem]) -> list[Judgement]: ...


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


class LLMJudge:
    """A chat model grading explanations against a dataset's :class:`FactorCriterion` (JSON reply).

    Replies are requested at temperature 0 (as in NEMO App. B.2). A reply that stays malformed
    after the backend's re-asks, or whose score is not 1 / 0.5 / 0, gives ``score=None``.
    """

    def __init__(
        self,
        backend: ChatBackend,
        criterion: str | FactorCriterion,
        name: str | None = None,
        max_tokens: int = 256,
        max_reasks: int = 2,
    ) -> None:
        self.backend = backend
        self.criterion = get_criterion(criterion)
        self.name = name or f"llm:{backend.model}"
        self.max_tokens = max_tokens
        self.max_reasks = max_reasks

    def messages(self, item: JudgeItem) -> list[dict[str, Any]]:
        """The chat messages sent for one item."""
        prompt = JUDGE_PROMPT.format(
            true_label=item.true_label or "unknown class",
            predicted_label=item.predicted_label or "another class",
            explanation=item.explanation.strip(),
            factor=f"{self.criterion.name}: {self.criterion.description}.",
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

    def __repr__(self) -> str:
        return f"LLMJudge(backend={self.backend!r}, criterion={self.criterion.name!r})"


class KeywordJudge:
    """Offline judge for CLOSED-VOCABULARY SYNTHETIC benchmarks only (CMNIST colours, CLEVR materials).

    It looks for the factor's words and synonyms (whole words, any case): 1 if one of
    ``criterion.keywords`` appears, 0.5 if only one of ``criterion.partial_keywords`` does, else 0.
    It does not read meaning (negations such as "not the colour" still match), so its scores are
    only meaningful where the factor has a small, known vocabulary; use :class:`LLMJudge` for real
    benchmarks. Its name says so in every table it appears in.
    """

    def __init__(
        self, criterion: str | FactorCriterion, name: str = "keyword-judge (closed-vocabulary synthetic only)"
    ) -> None:
        self.criterion = get_criterion(criterion)
        if not self.criterion.keywords:
            raise UserInputError(f"criterion {self.criterion.name!r} has no keywords; KeywordJudge needs a vocabulary")
        self.name = name
        self._full = self._pattern(self.criterion.keywords)
        self._partial = self._pattern(self.criterion.partial_keywords) if self.criterion.partial_keywords else None

    @staticmethod
    def _pattern(words: tuple[str, ...]) -> re.Pattern[str]:
        alternatives = sorted((re.escape(w).replace(r"\ ", r"\s+") for w in words), key=len, reverse=True)
        return re.compile(r"(?<![\w-])(?:" + "|".join(alternatives) + r")(?![\w-])", re.IGNORECASE)

    def score_text(self, explanation: str) -> Judgement:
        """Score one explanation."""
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
        return f"KeywordJudge(criterion={self.criterion.name!r})"


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
        """Every judge scores every item."""
        per_judge = [judge.judge(items) for judge in self.judges]
        return [
            PanelJudgement(
                scores={j.judge: j.score for j in column},
                reasons={j.judge: j.reason for j in column},
            )
            for column in zip(*per_judge)
        ]

    def __repr__(self) -> str:
        return f"JudgePanel({self.names})"
