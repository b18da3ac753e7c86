"""The structured explanation a distilled explainer writes: a hypothesis and the edit it implies.

SciTX asks its hypothesis source for ``{"cause_of_error": "..."}``. A distilled explainer answers in the
same JSON, with the counterfactual edit its hypothesis implies appended in a fixed form::

    {"cause_of_error": "The classifier read this 3 as a 8 because of the green colour. Edit: color -> red"}

Because every NEMO method reads ``cause_of_error`` (SciTX, CamMLLM, ChangeMLLM through ``ask_causes_batch``),
the edit travels with the explanation, and :class:`StructuredEditDeriver` reads it back exactly: no keyword
parser guesses an edit from free text. On generated data the edit is ``<attribute> -> <value>`` over the
generator's vocabulary; for an image editor it is the editing instruction itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from datamodules import sentences
from datamodules.fact_sheets import DEFAULT_EDITABLE
from datamodules.sentences import (  # noqa: F401  (re-exported: NEMO's callers read the sentences from here)
    ATTRIBUTE_WORDS,
    DISTILL_CAM_PROMPT,
    DISTILL_CHANGE_PROMPT,
    DISTILL_PROMPT,
    EDIT_MARK,
    format_answer,
    format_edit,
    hypothesis_sentence,
    value_name,
)
from nemo_train.backends.jsonparse import extract_json
from nemo_train.scoring.benchmark import ErrorSample

_ATTRIBUTE_EDIT = re.compile(r"^(?P<attribute>[a-z_]+)\s*->\s*(?P<value>[-+]?[\w. ]+?)$")


def split_answer(text: str) -> tuple[str, str | None]:
    """``(cause, edit text)`` of a structured explanation (JSON, also inside other text, or its ``cause_of_error``
    string); edit ``None`` when the text has no ``Edit:`` part."""
    return sentences.split_answer(text, parse_json=extract_json)


def parse_attribute_edit(body: str, vocabulary: Mapping[str, Sequence], editable: Sequence[str]) -> dict | None:
    """``{"attribute", "value"}`` (value as the renderer takes it) from ``color -> red``; ``None`` if invalid."""
    match = _ATTRIBUTE_EDIT.match(body.strip())
    if match is None or match.group("attribute") not in editable:
        return None
    attribute, value = match.group("attribute"), match.group("value").strip()
    values = list(vocabulary[attribute])
    if values and isinstance(values[0], str):
        return {"attribute": attribute, "value": values.index(value)} if value in values else None
    try:
        number = float(value)
    except ValueError:
        return None
    return {"attribute": attribute, "value": min(values, key=lambda v: abs(v - number))}


class StructuredEditDeriver:
    """Reads the edit a structured explanation states (``... Edit: color -> red``); no guessing.

    With ``vocabulary`` (generated data) the edit must be ``<attribute> -> <value>`` over ``editable``; without
    it the edit text is the instruction for an image editor. An answer without a valid edit gets ``None``
    (CEI 0, as for any underivable explanation).
    """

    def __init__(
        self, vocabulary: Mapping[str, Sequence] | None = None, editable: Sequence[str] = DEFAULT_EDITABLE
    ) -> None:
        self.vocabulary = None if vocabulary is None else {k: list(v) for k, v in vocabulary.items()}
        self.editable = list(editable)

    def derive_one(self, hypothesis: str) -> Any:
        _, body = split_answer(hypothesis)
        if not body:
            return None
        if self.vocabulary is None:
            return body
        return parse_attribute_edit(body, self.vocabulary, self.editable)

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list:
        return [self.derive_one(h) for h in hypotheses]
