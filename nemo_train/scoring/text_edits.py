"""One explanation, one reading: the edit an explanation implies is derived from its text.

The NEMO paper derives the counterfactual intervention *from the explanation*. On generated data the offline
route reads the explanation's sentence (the part before ``Edit:``) with the grounded judge's parser
(:class:`~nemo_train.scoring.grounding.ClaimParser`), takes the factor it blames (the first mentioned when it blames
two) and sets that factor back to its training-typical value (:func:`restore_value`); a sentence that blames three
or more factors, or every factor of the sheet, describes no error (the grading rubric) and gets no edit. An
``Edit:`` line (``... Edit: color -> white``) is a hint: when it edits a factor the sentence blames, its value is
used; when it edits another factor the explanation contradicts itself and is *inconsistent*. The judge grades the
same sentence, so the factor the judge reads as blamed and the factor the counterfactual changes are one.

:meth:`ExplanationReader.read` gives every record its ``blamed`` factors, the ``edit`` applied and ``consistent``;
:func:`headline` states what an inconsistent record scores (CEI 0 and LLM Match 0: an explanation that blames one
factor in its sentence and edits another describes no single cause). :class:`TextEditDeriver` is the offline
deriver (a parser, not a model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamodules.facts import DatasetFacts
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample
from nemo_train.scoring.grounding import ClaimParser
from nemo_train.scoring.structured import parse_attribute_edit, split_answer

_STATED = re.compile(r"^\s*(?P<attribute>[\w ]+?)\s*->\s*(?P<value>.+?)\s*\.?\s*$", re.S)


@dataclass(frozen=True)
class EditReading:
    """What one explanation says and the edit it implies.

    ``blamed``: the factors its sentence blames (first mention first; those its ``Edit:`` line names when the
    sentence blames none, as the judge reads it); ``hint``: the factors its ``Edit:`` line changes (empty without
    one); ``stated``: the ``Edit:`` line as an attribute edit (``None`` when absent or not one); ``edit``: the edit
    applied (``None``: nothing to edit, CEI 0); ``consistent``: the ``Edit:`` line and the applied edit change a
    factor the sentence blames.
    """

    blamed: tuple[str, ...]
    hint: tuple[str, ...] = ()
    stated: dict | None = None
    edit: Any = None
    consistent: bool = True


def restore_value(
    facts: DatasetFacts, attribute: str, sample: ErrorSample, cause: Mapping[str, Any] | None = None
) -> Any:
    """The stored value that undoes ``attribute`` for this image: its training-typical value.

    The planted cause of a biased benchmark (CMNIST's colour, CLEVR's material) has a typical value per class:
    the first value the true class had in training that differs from the image's (``cause["values"]``); every
    other factor has the sheet's :attr:`~datamodules.facts.Factor.typical`, else its ``neutral`` value. ``None``
    when the factor has none (it varies uniformly in training: no value to restore).
    """
    factor = facts.factor(attribute)
    cause = cause or {}
    if cause.get("attribute") == attribute and cause.get("values") is not None:
        trained = [factor.stored(v) for v in cause["values"].get(sample.label, [])]
        current = (sample.attrs or {}).get(attribute)
        differing = [v for v in trained if v != current]
        return differing[0] if differing else (trained[0] if trained else None)
    if factor.typical is not None:
        return factor.typical_stored
    return None if factor.neutral is None else factor.stored(factor.neutral)


class ExplanationReader:
    """Reads explanations of one generated benchmark: blamed factors, the ``Edit:`` hint, the edit to apply.

    Args:
        facts: the benchmark's fact sheet; vocabulary: the renderer's attributes; editable: the factors an edit
            may change; cause: the benchmark's known cause (class-dependent typical values of a planted bias).
    """

    def __init__(
        self,
        facts: DatasetFacts,
        vocabulary: Mapping[str, Sequence],
        editable: Sequence[str],
        cause: Mapping[str, Any] | None = None,
    ) -> None:
        self.facts, self.parser = facts, ClaimParser(facts)
        self.vocabulary = {k: list(v) for k, v in vocabulary.items()}
        self.editable = [a for a in editable if a in self.vocabulary]
        self.cause = dict(cause or {})

    def stated_edit(self, body: str) -> tuple[dict | None, tuple[str, ...]]:
        """``(attribute edit, factors)`` of an ``Edit:`` line: ``color -> white`` (factor words accepted:
        ``colour -> white``), else the factors the line mentions in free words."""
        match = _STATED.match(body)
        if match is not None:
            factor = self.parser.factor_of(match.group("attribute"))
            if factor is not None:
                edit = parse_attribute_edit(f"{factor.name} -> {match.group('value')}", self.vocabulary, self.editable)
                return edit, (factor.name,)
        return None, self.parser.read(body).blamed

    def read(
        self, sample: ErrorSample, text: str, class_names: Sequence[str] = (), applied: Any = "derive"
    ) -> EditReading:
        """The reading of ``text`` about ``sample``; ``applied``: the edit another deriver applied (checked
        against the sentence), or ``"derive"`` to derive it here."""
        sentence, body = split_answer(text or "")
        names = self.facts.value_names(sample.attrs or {})
        true = class_names[sample.label] if class_names else ""
        pred = class_names[sample.prediction] if class_names else ""
        reading = self.parser.read(sentence, names, true, pred)
        blamed = reading.blamed
        stated, hint = self.stated_edit(body) if body else (None, ())
        if not blamed:
            blamed = hint  # the judge reads a sentence that blames nothing by its edit
        if applied == "derive":  # a sentence that names too many factors describes no error: nothing to edit
            vague = getattr(reading, "describes_nothing", False)
            applied = None if vague else self._derive(sample, blamed, stated)
        agrees = not hint or any(f in blamed for f in hint)
        if isinstance(applied, Mapping) and blamed:
            agrees = agrees and applied.get("attribute") in blamed
        return EditReading(tuple(blamed), tuple(hint), stated, applied, agrees)

    def _derive(self, sample: ErrorSample, blamed: Sequence[str], stated: dict | None) -> dict | None:
        if stated is not None and stated["attribute"] in blamed:
            return stated
        for attribute in blamed:
            if attribute not in self.editable:
                continue
            value = restore_value(self.facts, attribute, sample, self.cause)
            if value is not None:
                return {"attribute": attribute, "value": value}
        return None


class TextEditDeriver:
    """The offline deriver of generated benchmarks: the edit an explanation's text implies (a parser, not a model).

    The sentence's blamed factor set to its training-typical value; an ``Edit:`` line that agrees with the
    sentence gives the value instead (:class:`ExplanationReader`).
    """

    def __init__(self, reader: ExplanationReader) -> None:
        self.reader = reader

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[dict | None]:
        if sample.attrs is None:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no generator attributes; the text edit deriver needs them"
            )
        return [self.reader.read(sample, h, class_names).edit for h in hypotheses]


def reader_for(benchmark) -> ExplanationReader | None:
    """The reader of a generated benchmark (``None`` without a fact sheet: image folders)."""
    if benchmark.facts is None or benchmark.vocabulary is None:
        return None
    editable = (benchmark.cause or {}).get("editable") or benchmark.facts.editable
    return ExplanationReader(benchmark.facts, benchmark.vocabulary, editable, benchmark.cause)


def headline(cei: float, llm_match: float | None, consistent: bool | None) -> tuple[float, float | None]:
    """``(CEI, LLM Match)`` a record counts with: an inconsistent explanation (its ``Edit:`` line or its applied
    edit changes a factor its sentence does not blame) scores 0 on both; a consistent one (or one no fact sheet
    can check, ``None``) keeps its scores."""
    if consistent is False:
        return 0.0, (None if llm_match is None else 0.0)
    return cei, llm_match
