"""The sentences of a structured explanation: the questions a distilled explainer is asked and the answer it
writes (a hypothesis and the edit it implies, ``... Edit: color -> red``).

Plain text over a generator's vocabulary, shared by the pair builders (``datamodules``), the tiny model's
tokenizer corpus (``nemo_train.models``) and NEMO (:mod:`nemo_train.scoring.structured`, which reads answers back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

EDIT_MARK = "Edit:"
_EDIT = re.compile(r"Edit:\s*(?P<body>.+?)\s*\.?\s*$", re.S)

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
#: The same question with the error (left) beside references of its true class that each share at most one
#: unusual trait of it, and how the classifier read each (``{readings}``: :func:`evidence_readings`); no factor
#: is named, so which trait the misread references share has to be seen in the picture.
DISTILL_EVIDENCE_PROMPT = (
    'Left: a "{true_name}" the classifier called a "{pred_name}". Right, numbered from the left: "{true_name}"s '
    "that share one trait of it each, or none; the classifier {readings}. "
    'Reply in JSON: {{"cause_of_error": "the cause. Edit: the change that fixes it"}}'
)

#: The same question with the classifier's readings of the references tallied per unusual trait of the error,
#: the trait named (``{legend}`` and ``{tallies}``: :func:`evidence_tallies`); the montage shows one exemplar's
#: references.
DISTILL_TALLY_PROMPT = (
    'Left: a "{true_name}" the classifier called a "{pred_name}". Right: "{true_name}"s with its unusual traits. '
    '{legend}: {tallies}. Reply in JSON: {{"cause_of_error": "the cause. Edit: the change that fixes it"}}'
)


def evidence_tallies(tallies: Mapping[str, tuple[int, int]], exemplars: int, paired: bool) -> tuple[str, str]:
    """``("Misread with the trait alone, read right without it", "colour 3/3 0/3; size 0/3 3/3")``: the legend
    and, per trait word, its ``alone`` references misread and (``paired``) its ``restored`` ones read right, out
    of ``exemplars``."""
    legend = "Misread with the trait alone" + (", read right without it" if paired else "")
    parts = [
        f"{word} {alone}/{exemplars}" + (f" {restored}/{exemplars}" if paired else "")
        for word, (alone, restored) in tallies.items()
    ]
    return legend, "; ".join(parts)


def evidence_readings(predictions: Sequence[int], label: int, class_names: Sequence[str]) -> str:
    """``got 1 right, read 2 as a "5", got 3 right``: the classifier's reading of each numbered reference."""
    parts = [
        f"got {i} right" if int(p) == int(label) else f'read {i} as a "{class_names[int(p)]}"'
        for i, p in enumerate(predictions, 1)
    ]
    return ", ".join(parts)


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


#: What a teacher's sentence asserts: the classes, the factor and its value (``values``: ``because of the green
#: colour``), the classes and the factor alone (``factor``: ``because of its colour``; the edit still names the value
#: that fixes it), or the factor alone (``cause``: ``The classifier erred because of its colour.``: no restating of
#: the classes the question gives, which a small student can copy wrongly).
Claims = Literal["values", "factor", "cause"]


def hypothesis_sentence(
    sample: Any, edit: Mapping, vocabulary, class_names, obj: str = "object", claims: Claims = "values"
) -> str:
    """A sentence naming the classes and what the edit changes, the value as the vocabulary names it:
    ``The classifier read this 3 as a 8 because of the green colour.`` (``the -45 degree rotation``, ``the
    stripes background``, ``the small size``); written by the exhaustive teacher, whose finding is the edit.
    ``claims="factor"`` names the factor without its value (``because of its colour``); ``claims="cause"`` the
    factor alone, without the classes either (``The classifier erred because of its colour.``).

    The classes come first, so an explainer copies them from its question at a fixed distance."""
    attribute = edit["attribute"]
    word = ATTRIBUTE_WORDS.get(attribute, attribute)
    if claims == "cause":
        return f"The classifier erred because of its {word}."
    true, pred = class_names[sample.label], class_names[sample.prediction]
    if claims == "factor":
        return f"The classifier read this {true} as a {pred} because of its {word}."
    current = value_name(vocabulary, attribute, sample.attrs[attribute])
    if attribute == "angle":
        current = f"{current} degree"
    return f"The classifier read this {true} as a {pred} because of the {current} {word}."


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def split_answer(text: str, parse_json: Callable[[str], Any] = _json_or_none) -> tuple[str, str | None]:
    """``(cause, edit text)`` of a structured explanation (JSON or its ``cause_of_error`` string); edit ``None``
    when the text has no ``Edit:`` part. ``parse_json`` reads the JSON (default: the whole text as JSON)."""
    parsed = parse_json(text) if "{" in text else None
    if isinstance(parsed, dict) and isinstance(parsed.get("cause_of_error"), str):
        text = parsed["cause_of_error"]
    match = _EDIT.search(text)
    if match is None:
        return text.strip(), None
    return text[: match.start()].strip(), match.group("body").strip()
