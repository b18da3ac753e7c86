"""Trivial rows of a generated benchmark: answers a metric must not reward, beside KnownCause and Constant.

* :class:`EverythingExplainer` names every factor of the fact sheet ("the colour, style, ... or position");
* :class:`ClassFreeExplainer` blames one fixed factor (the most frequent cause) and states no class;
* :class:`ClassPriorExplainer` blames, for each predicted class, the cause most frequent among that class's
  errors on a disjoint split (:func:`class_prior`), the shortcut a student can learn from the digit alone;
* :class:`OddOneOutExplainer` blames one of the image's factors whose value is off its training-typical value,
  drawn with a seed, without the classifier.

None of them looks at the classifier. Each blaming sentence carries the edit its factor implies (the factor back
to its typical value), so its CEI is what that reading earns.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping

from nemo_train.errors import UserInputError
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.structured import EDIT_MARK, format_edit, hypothesis_sentence
from nemo_train.scoring.text_edits import restore_value

#: causes that are not one factor (``label_causes``): never a prior
UNEXPLAINED = frozenset({"none", "several"})


def _facts(benchmark: NemoBenchmark):
    if benchmark.facts is None or benchmark.vocabulary is None:
        raise UserInputError(f"benchmark {benchmark.name!r} has no fact sheet; the trivial rows need a generated one")
    return benchmark.facts


def blame_sentence(sample: ErrorSample, benchmark: NemoBenchmark, attribute: str) -> str:
    """The structured sentence blaming ``attribute`` of this image (its value as the image has it), with the edit
    back to the factor's typical value when it has one."""
    facts = _facts(benchmark)
    text = hypothesis_sentence(
        sample, {"attribute": attribute}, benchmark.vocabulary, benchmark.class_names, facts.object_word
    )
    value = restore_value(facts, attribute, sample, benchmark.cause)
    if value is None or attribute not in (benchmark.cause or {}).get("editable", facts.editable):
        return text
    return f"{text} {EDIT_MARK} {format_edit({'attribute': attribute, 'value': value}, benchmark.vocabulary)}"


def most_frequent(causes: Iterable[str]) -> str | None:
    """The most frequent single-factor cause (ties: the first met); ``None`` when there is none."""
    counts = Counter(c for c in causes if c and c not in UNEXPLAINED)
    return max(counts, key=lambda c: counts[c]) if counts else None


def class_prior(errors: Iterable[tuple[int, str]]) -> tuple[dict[int, str], str | None]:
    """``({predicted class: its most frequent cause}, the overall most frequent cause)`` of ``(predicted class,
    cause)`` pairs; ties go to the cause met first."""
    errors = [(int(p), c) for p, c in errors if c and c not in UNEXPLAINED]
    by_class: dict[int, list[str]] = {}
    for predicted, cause in errors:
        by_class.setdefault(predicted, []).append(cause)
    return {p: most_frequent(c) for p, c in by_class.items()}, most_frequent(c for _, c in errors)


class EverythingExplainer:
    """Names every factor of the fact sheet, hedged ("may come from the colour, style, ... or position")."""

    name = "Everything"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        facts = _facts(benchmark)
        words = [f.word for f in facts.factors]
        listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        text = f"The error may come from the {listed} of the {facts.object_word}."
        return Explanation(text, [text])


class ClassFreeExplainer:
    """One factor for every error, with no class claim: "The colour of the digit caused the error."

    Args:
        cause: the factor blamed (a factor name of the sheet).
    """

    name = "Class-free constant"

    def __init__(self, cause: str) -> None:
        self.cause = cause

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        facts = _facts(benchmark)
        text = f"The {facts.factor(self.cause).word} of the {facts.object_word} caused the error."
        return Explanation(text, [text])


class ClassPriorExplainer:
    """Blames the cause most frequent among the errors predicted as this error's class (on a disjoint split).

    Args:
        prior: predicted class -> factor; fallback: the factor for a predicted class the split has no error of.
    """

    name = "Class prior"

    def __init__(self, prior: Mapping[int, str], fallback: str) -> None:
        self.prior, self.fallback = {int(k): v for k, v in prior.items()}, fallback

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        text = blame_sentence(sample, benchmark, self.prior.get(sample.prediction, self.fallback))
        return Explanation(text, [text])


def off_typical(sample: ErrorSample, benchmark: NemoBenchmark) -> list[str]:
    """The image's factors (not distractors) whose value is off their training-typical value, in sheet order."""
    facts = _facts(benchmark)
    attrs, cause = sample.attrs or {}, benchmark.cause or {}
    found = []
    for factor in facts.factors:
        if factor.distractor or factor.name not in attrs:
            continue
        if cause.get("attribute") == factor.name and cause.get("values") is not None:  # typical per class
            usual = {factor.stored(v) for v in cause["values"].get(sample.label, [])}
        elif factor.typical is not None:
            usual = {factor.typical_stored}
        else:  # varies freely in training: no value is unusual
            continue
        if attrs[factor.name] not in usual:
            found.append(factor.name)
    return found


class OddOneOutExplainer:
    """Blames one of the image's off-typical factors (:func:`off_typical`), drawn with ``seed`` and the error's id.

    Args:
        seed: the draw's seed (the same seed names the same factor of the same error).
    """

    name = "Odd-one-out"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        odd = off_typical(sample, benchmark)
        if not odd:  # nothing unusual: the first factor that is not a distractor
            odd = [next(f.name for f in _facts(benchmark).factors if not f.distractor)]
        factor = random.Random(f"{self.seed}:{sample.sample_id}").choice(odd)
        text = blame_sentence(sample, benchmark, factor)
        return Explanation(text, [text])
