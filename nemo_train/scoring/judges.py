"""Judges that score whether an explanation names a benchmark's failure factor: 1, 0.5 or 0.

Each benchmark varies along a known factor (NEMO Sec. 4.1.2), written down as a
:class:`FactorCriterion`. :class:`LLMJudge` asks a chat model to grade an explanation against it;
:class:`KeywordJudge` is an offline stand-in that only suits closed-vocabulary synthetic
benchmarks; :class:`JudgePanel` averages several judges and keeps each one's score.

Where each error has its own cause and the image's attributes are known (a generated benchmark with a
:class:`~datamodules.facts.DatasetFacts` sheet), a :class:`JudgeItem` carries ``cause`` and ``attributes``:
judges then grade against this error's cause and also report ``grounding``, the share of the explanation's
checkable claims about the image that are true. :class:`GroundedJudge` is the offline stand-in for that.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from datamodules.facts import DatasetFacts
from nemo_train.backends.base import _STRICT_JSON, ChatBackend, MalformedReplyError
from nemo_train.backends.messages import assistant_message, system_message, user_message
from nemo_train.backends.providers import object_schema
from nemo_train.errors import UserInputError
from nemo_train.scoring.criteria import (
    CRITERIA,
    GROUNDED_PROMPT,
    JUDGE_PROMPT,
    JUDGE_SYSTEM,
    FactorCriterion,
    criterion_key,
    get_criterion,
    read_grade,
    snap_grounding,
    snap_score,
)
from nemo_train.scoring.grounding import ClaimParser

__all__ = [
    "CRITERIA",
    "FactorCriterion",
    "GroundedJudge",
    "Judge",
    "JudgeItem",
    "JudgePanel",
    "Judgement",
    "KeywordJudge",
    "LLMJudge",
    "PanelJudgement",
    "get_criterion",
    "snap_grounding",
    "snap_score",
]

#: Benchmarks with a written-down criterion (a judge's ``criterion`` option)
CriterionName = Literal["imagenet_r", "objectnet", "imagenet_d", "cmnist", "clevr"]


@dataclass(frozen=True)
class Judgement:
    """One judge's score of one explanation: 1, 0.5, 0, or ``None`` when the judge failed to answer.

    ``grounding`` is the share of the explanation's checkable claims about the image that are true (0..1);
    ``None`` when it makes none or the judge did not check.
    """

    judge: str
    score: float | None
    reason: str = ""
    grounding: float | None = None


@dataclass(frozen=True)
class JudgeItem:
    """What a judge sees: the explanation, the true and predicted class names and, on generated data, the
    image's known attribute values as text (``{"color": "green", "angle": "45", ...}``) and the factor that
    caused this error (``"color"``)."""

    explanation: str
    true_label: str = ""
    predicted_label: str = ""
    attributes: dict[str, str] | None = None
    cause: str | None = None


class Judge(ABC):
    """Scores explanations against a :class:`FactorCriterion`: ``judge(items) -> list[Judgement]``.

    ``criterion=None`` (the usual configuration) takes the evaluated benchmark's criterion when the
    pipeline calls :meth:`for_benchmark`, which also hands over the benchmark's fact sheet when it has one.
    """

    name: str
    criterion: FactorCriterion | None = None
    facts: DatasetFacts | None = None
    #: whether the judge cannot work without a benchmark-level criterion (even with a fact sheet)
    requires_criterion: bool = True

    @abstractmethod
    def judge(self, items: list[JudgeItem]) -> list[Judgement]: ...

    def for_benchmark(self, benchmark: str, facts: DatasetFacts | None = None) -> Judge:
        """Set the criterion from the benchmark's name and the fact sheet unless configured; returns ``self``.

        A benchmark without a written-down criterion is accepted when a fact sheet is given and the judge
        can grade per-error causes (items without ``cause`` then fail with a clear message)."""
        if facts is not None and self.facts is None:
            self._set_facts(facts)
        if self.criterion is None:
            if criterion_key(benchmark) in CRITERIA or self.facts is None or self.requires_criterion:
                self._set_criterion(get_criterion(benchmark))
        return self

    def _set_facts(self, facts: DatasetFacts) -> None:
        self.facts = facts

    def _set_criterion(self, criterion: FactorCriterion) -> None:
        self.criterion = criterion

    def _require_criterion(self) -> FactorCriterion:
        if self.criterion is None:
            raise UserInputError(f"judge {self.name!r} has no criterion; pass one or call for_benchmark()")
        return self.criterion

    def fingerprint(self) -> dict[str, Any]:
        """What changes this judge's scores (for result fingerprints): its class, name, criterion and facts."""
        out = {"class": type(self).__name__, "name": self.name, "criterion": getattr(self.criterion, "name", None)}
        if self.facts is not None:
            out["facts"] = self.facts.name
        return out


#: what an off-scale grade is told when it is asked again
OFF_SCALE_REASK = (
    "Your grade is off the scale: {problem}. Reply again with the JSON object only, with score exactly 1, 0.5 "
    "or 0 and grounding a number from 0 to 1 or null."
)
#: the reply of :data:`JUDGE_PROMPT` and of :data:`GROUNDED_PROMPT`, asked of endpoints that constrain output
JUDGE_SCHEMA = object_schema(reasoning="string", score="number")
GROUNDED_SCHEMA = object_schema(reasoning="string", score="number", grounding=("number", "null"))


class LLMJudge(Judge):
    """A chat model grading explanations against a dataset's :class:`FactorCriterion` (JSON reply).

    Replies are requested at temperature 0 (as in NEMO App. B.2). A reply that stays malformed after the
    backend's re-asks gives ``score=None``; so does one that stays off the scale (a score not 1 / 0.5 / 0, a
    grounding outside [0, 1]) after ``max_reasks`` re-asks that name the problem: it is a failed judgement,
    never clamped, its cached replies forgotten, and inside ``strict_json`` it raises
    :class:`~nemo_train.backends.base.MalformedReplyError` like a malformed reply. An item with a
    ``cause`` or ``attributes`` gets :data:`GROUNDED_PROMPT` (this error's cause, the image's attributes,
    a ``grounding`` asked for); others get :data:`JUDGE_PROMPT`.
    """

    requires_criterion = False

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
        if item.cause is not None or item.attributes is not None:
            return [system_message(JUDGE_SYSTEM), user_message(self._grounded_prompt(item))]
        prompt = JUDGE_PROMPT.format(
            true_label=item.true_label or "unknown class",
            predicted_label=item.predicted_label or "another class",
            explanation=item.explanation.strip(),
            factor=f"{self._require_criterion().name}: {self.criterion.description}.",
        )
        return [system_message(JUDGE_SYSTEM), user_message(prompt)]

    def _grounded_prompt(self, item: JudgeItem) -> str:
        if item.cause is None:
            criterion = self._require_criterion()
            cause = f"{criterion.name} ({criterion.description})"
        elif self.facts is not None and item.cause in self.facts.factor_names:
            cause = f'the {self.facts.factor(item.cause).word} (attribute "{item.cause}")'
        else:
            cause = f'the attribute "{item.cause}"'
        lines = [f"- {key}: {value}" for key, value in (item.attributes or {}).items()]
        return GROUNDED_PROMPT.format(
            true_label=item.true_label or "unknown class",
            predicted_label=item.predicted_label or "another class",
            explanation=item.explanation.strip(),
            attributes="\n".join(lines) or "- none known (only the two class names can be checked)",
            cause=cause,
        )

    def judge(self, items: list[JudgeItem]) -> list[Judgement]:
        """Score each item (requests run ``backend.concurrency`` at a time); off-scale replies are re-asked."""
        grounded = {item.cause is not None or item.attributes is not None for item in items}
        schema = (GROUNDED_SCHEMA if True in grounded else JUDGE_SCHEMA) if len(grounded) == 1 else None
        sampling = {"n": 1, "temperature": 0.0, "max_tokens": self.max_tokens}
        conversations = [self.messages(item) for item in items]
        replies = [r[0] for r in self._ask(conversations, schema, sampling)]
        asked = [[c] for c in conversations]  # every request that led to each reply
        for _ in range(self.max_reasks):
            off = [i for i, r in enumerate(replies) if r is not None and read_grade(r)[2] is not None]
            if not off:
                break
            again = [asked[i][-1] + [assistant_message(json.dumps(replies[i])), user_message(OFF_SCALE_REASK.format(
                problem=read_grade(replies[i])[2]))] for i in off]  # fmt: skip
            for i, conversation, (reply,) in zip(off, again, self._ask(again, schema, sampling)):
                replies[i] = reply
                asked[i].append(conversation)
        out = []
        for reply, requests in zip(replies, asked):
            if reply is None:
                out.append(Judgement(self.name, None, "no JSON reply"))
                continue
            score, grounding, problem = read_grade(reply)
            if problem is not None:
                self._forget(requests, schema, sampling)
                if _STRICT_JSON.get():  # a stored evaluation: the sample fails and a rerun asks again
                    raise MalformedReplyError(
                        f"{type(self.backend).__name__} {self.backend.model!r}: a judge's grade is off the scale "
                        f"({problem}) after {self.max_reasks} re-asks"
                    )
                out.append(Judgement(self.name, None, f"off-scale reply: {problem}"))
                continue
            out.append(Judgement(self.name, score, str(reply.get("reasoning", "")), grounding))
        return out

    def _ask(self, conversations: list, schema: dict[str, Any] | None, sampling: dict[str, Any]) -> list:
        return self.backend.chat_json_batch(conversations, max_reasks=self.max_reasks, schema=schema, **sampling)

    def _forget(self, requests: list, schema: dict[str, Any] | None, sampling: dict[str, Any]) -> None:
        """Drop the cached replies of an off-scale grade's requests, so a rerun asks the model again."""
        for messages in requests:
            key = self.backend._request_key(messages, {**sampling, "schema": schema})
            if key is not None:
                self.backend.cache.discard(key)

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

    def _set_facts(self, facts: DatasetFacts) -> None:
        """Keywords only: a fact sheet is not used (and so not recorded in the fingerprint)."""

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


class GroundedJudge(Judge):
    """OFFLINE STAND-IN, NOT A LANGUAGE MODEL: checks an explanation against the image's known attributes.

    A rule-based :class:`~nemo_train.scoring.grounding.ClaimParser` over the benchmark's fact sheet finds the
    factors the explanation blames (negations read), the factors its ``Edit:`` line changes and its checkable
    claims (attribute values, true and predicted class). Against the item's own ``cause``, by the rubric of
    docs/GRADING.md (:meth:`~nemo_train.scoring.claims.Reading.match`): 1 if the cause is the only blamed factor,
    0.5 if it is blamed with exactly one other (not every factor of the sheet), 0 otherwise; a false claim or
    an Edit line that changes another factor than the text blames gives 0. ``grounding`` is the share of true
    claims. An item without ``cause`` is graded against the benchmark criterion's factor (or, when no factor of
    the sheet matches the criterion, by :class:`KeywordJudge`'s keywords), false claims still giving 0. Without
    ``attributes`` only class claims are checked. The parser's rules are listed in
    :mod:`nemo_train.scoring.grounding`; it reads no meaning beyond them. Its agreement with hand labels is
    measured by ``nemo-train judge`` on the shipped labelled set (docs/GRADING.md).
    """

    requires_criterion = False

    def __init__(
        self,
        facts: DatasetFacts | None = None,
        criterion: CriterionName | FactorCriterion | None = None,
        name: str = "grounded-judge (attribute parser, not a model)",
    ) -> None:
        self.name = name
        self.criterion = None if criterion is None else get_criterion(criterion)
        self.facts = None
        self._parser = ClaimParser(None)
        if facts is not None:
            self._set_facts(facts)

    def _set_facts(self, facts: DatasetFacts) -> None:
        self.facts = facts
        self._parser = ClaimParser(facts)

    def _cause(self, item: JudgeItem) -> str | None:
        """The factor this item is graded against; ``None``: fall back to the criterion's keywords."""
        if item.cause is None:
            criterion = self._require_criterion()
            factor = self._parser.factor_of(criterion.name)
            return None if factor is None else factor.name
        if self.facts is None:
            raise UserInputError(
                f"judge {self.name!r} got an error caused by {item.cause!r} but has no fact sheet; "
                "pass facts= or call for_benchmark(name, facts)"
            )
        factor = self._parser.factor_of(item.cause)
        if factor is None:
            raise UserInputError(
                f"cause {item.cause!r} is not a factor of {self.facts.name}; expected one of {self.facts.factor_names}"
            )
        return factor.name

    def score_item(self, item: JudgeItem) -> Judgement:
        """Score one explanation against its image."""
        reading = self._parser.read(item.explanation, item.attributes, item.true_label, item.predicted_label)
        cause = self._cause(item)
        if cause is None:
            keyword = KeywordJudge(self.criterion, name=self.name).score_text(item.explanation)
            score, found = (0.0 if reading.false_claims else keyword.score), keyword.reason
        else:
            score, found = reading.match(cause)
        return Judgement(self.name, score, found + reading.claims_note(), reading.grounding)

    def judge(self, items: list[JudgeItem]) -> list[Judgement]:
        """Score each item."""
        return [self.score_item(item) for item in items]

    def __repr__(self) -> str:
        facts = getattr(self.facts, "name", None)
        return f"GroundedJudge(facts={facts!r}, criterion={getattr(self.criterion, 'name', None)!r})"


from nemo_train.scoring.panel import JudgePanel, PanelJudgement  # noqa: E402  (the panel reads the judges above)
