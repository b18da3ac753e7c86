"""The structured explanation a distilled explainer writes: a hypothesis and the edit it implies.

SciTX asks its hypothesis source for ``{"cause_of_error": "..."}``. A distilled explainer answers in the
same JSON, with the counterfactual edit its hypothesis implies appended in a fixed form::

    {"cause_of_error": "The classifier read this 3 as a 8 because of the green colour. Edit: color -> red"}

Because every NEMO method reads ``cause_of_error`` (SciTX, CamMLLM, ChangeMLLM through ``ask_causes``), the
edit travels with the explanation, and :class:`StructuredEditDeriver` reads it back exactly: no keyword
parser guesses an edit from free text. On generated data the edit is ``<attribute> -> <value>`` over the
generator's vocabulary; for an image editor it is the editing instruction itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_train.backends.jsonparse import extract_json
from nemo_train.nemo.benchmark import ErrorSample

EDIT_MARK = "Edit:"
_EDIT = re.compile(r"Edit:\s*(?P<body>.+?)\s*\.?\s*$", re.S)
_ATTRIBUTE_EDIT = re.compile(r"^(?P<attribute>[a-z_]+)\s*->\s*(?P<value>[-+]?[\w. ]+?)$")

#: Words used for an attribute in a sentence.
ATTRIBUTE_WORDS = {"color": "colour", "angle": "rotation", "scale": "size"}

#: The question a distilled explainer is trained on and asked (one image; class names filled in).
DISTILL_PROMPT = (
    'The classifier called this "{true_name}" a "{pred_name}". '
    'Reply in JSON: {{"cause_of_error": "the cause. Edit: the change that fixes it"}}'
)
#: The same question about a Grad-CAM overlay of the prediction (CamMLLM with a distilled explainer).
DISTILL_CAM_PROMPT = (
    'Grad-CAM of the classifier calling this "{true_name}" a "{pred_name}". '
    'Reply in JSON: {{"cause_of_error": "the cause. Edit: the change that fixes it"}}'
)
#: The same question with the error (left) beside a correctly classified reference (ChangeMLLM).
DISTILL_CHANGE_PROMPT = (
    'Left: a "{true_name}" the classifier called a "{pred_name}"; right: a "{ref_name}" it got right. '
    'Reply in JSON: {{"cause_of_error": "the cause. Edit: the change that fixes it"}}'
)


def value_name(vocabulary: Mapping[str, Sequence], attribute: str, value: Any) -> str:
    """A vocabulary value as written in an edit (``red``; ``-15`` for angles)."""
    values = list(vocabulary[attribute])
    return str(values[int(value)]) if values and isinstance(values[0], str) else str(int(value))


def format_edit(edit: Any, vocabulary: Mapping[str, Sequence] | None = None) -> str:
    """``color -> red`` for an attribute edit (``{"attribute", "value"}``), the text for an instruction."""
    if isinstance(edit, Mapping):
        return f"{edit['attribute']} -> {value_name(vocabulary or {}, edit['attribute'], edit['value'])}"
    return str(edit).strip()


def format_answer(hypothesis: str, edit: Any, vocabulary: Mapping[str, Sequence] | None = None) -> str:
    """The distilled explainer's target: ``{"cause_of_error": "<hypothesis> Edit: <edit>"}``."""
    text = f"{hypothesis.strip()} {EDIT_MARK} {format_edit(edit, vocabulary)}"
    return json.dumps({"cause_of_error": text}, ensure_ascii=False)


def hypothesis_sentence(sample: ErrorSample, edit: Mapping, vocabulary, class_names, obj: str = "object") -> str:
    """A sentence naming the classes and what the edit changes, the value as the vocabulary names it:
    ``The classifier read this 3 as a 8 because of the green colour.`` (``the -45 degree rotation``, ``the
    stripes background``, ``the small size``); written by the exhaustive teacher, whose finding is the edit.

    The classes come first, so an explainer copies them from its question at a fixed distance."""
    attribute = edit["attribute"]
    word = ATTRIBUTE_WORDS.get(attribute, attribute)
    current = value_name(vocabulary, attribute, sample.attrs[attribute])
    if attribute == "angle":
        current = f"{current} degree"
    true, pred = class_names[sample.label], class_names[sample.prediction]
    return f"The classifier read this {true} as a {pred} because of the {current} {word}."


def split_answer(text: str) -> tuple[str, str | None]:
    """``(cause, edit text)`` of a structured explanation (JSON or its ``cause_of_error`` string); edit ``None``
    when the text has no ``Edit:`` part."""
    parsed = extract_json(text) if "{" in text else None
    if isinstance(parsed, dict) and isinstance(parsed.get("cause_of_error"), str):
        text = parsed["cause_of_error"]
    match = _EDIT.search(text)
    if match is None:
        return text.strip(), None
    return text[: match.start()].strip(), match.group("body").strip()


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
        self, vocabulary: Mapping[str, Sequence] | None = None, editable: Sequence[str] = ("color", "angle")
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
