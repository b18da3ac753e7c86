"""Known-shift pairs: shifts digits whose one shifted factor is the answer, in the distilled explainer's form.

Every image of the shift distribution has exactly one factor off its typical value, so the structured answer
blaming that factor is known without a classifier: ``{"cause_of_error": "The classifier read this 3 as a 8
because of the dotted style. Edit: style -> solid"}`` (:func:`datamodules.sentences.hypothesis_sentence`). The
class names of the question are drawn at random (true and predicted differ), so an explainer can only get them
right by reading the question. These pairs probe whether a student can learn the answer form from the image
(``scripts/student_probe.py``) and give tests teacher-like pairs; :func:`score_answer` grades an answer field by
field against its reference.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import torch

from datamodules.explanations.builders import _save_png, _split
from datamodules.explanations.records import ExplanationRecord, write_records
from nemo_train.errors import UserInputError

_SENTENCE = re.compile(
    r"^The classifier read this (?P<true>\S+) as an? (?P<pred>\S+) because of the (?P<value>.+?) (?P<word>\w+)\.?$"
)
_EDIT = re.compile(r"^(?P<attribute>[a-z_]+)\s*->\s*(?P<value>\S+)$")
#: The grades of :func:`score_answer`.
GRADES = ("factor", "value", "classes", "all", "exact")


def known_shift_records(
    out_dir: str | Path, size: int, seed: int = 0, pool: str = "train", prefix: str = ""
) -> list[ExplanationRecord]:
    """``size`` known-shift pairs (images saved as PNGs under ``out_dir/images``) from exemplar pool ``pool``.

    Each record's ``cause`` is the shifted factor, ``label`` / ``prediction`` the class indices the question
    names, ``prompt`` the distillation question and ``explanation`` the structured answer.
    """
    from datamodules.sentences import DISTILL_PROMPT, format_answer, hypothesis_sentence
    from datamodules.shifts import CAUSE_FACTORS, FACTS, ShiftsDataModule

    if size < 1:
        raise UserInputError(f"known-shift pairs size={size}; expected at least 1")
    data = ShiftsDataModule(gaps="none", train_size=10, test_size=10, seed=seed)
    data.setup()
    split = data.shifted_split(pool, size, seed + 11)
    gen = torch.Generator().manual_seed(seed + 12)
    true = torch.randint(0, 10, (size,), generator=gen)
    pred = (true + torch.randint(1, 10, (size,), generator=gen)) % 10
    images_dir = Path(out_dir) / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    classes = list(FACTS.classes)
    records = []
    for i in range(size):
        attrs = {k: v[i].item() for k, v in split.attrs.items()}
        factor = next(FACTS.factor(n) for n in CAUSE_FACTORS if attrs[n] != FACTS.factor(n).typical_stored)
        sample = SimpleNamespace(label=int(true[i]), prediction=int(pred[i]), attrs=attrs)
        edit = {"attribute": factor.name, "value": factor.typical_stored}
        sentence = hypothesis_sentence(sample, edit, FACTS.vocabulary, classes, FACTS.object_word)
        records.append(
            ExplanationRecord(
                image=_save_png(split.images[i].float() / 255.0, images_dir / f"{prefix}{i:06d}.png"),
                explanation=format_answer(sentence, edit, FACTS.vocabulary),
                prompt=DISTILL_PROMPT.format(true_name=classes[sample.label], pred_name=classes[sample.prediction]),
                cause=factor.name,
                label=sample.label,
                prediction=sample.prediction,
                provenance={"source": "known-shift", "attrs": attrs},
            )
        )
    return records


def build_known_shift_pairs(
    out_dir: str | Path, size: int = 200, seed: int = 0, val_fraction: float = 0.2, pool: str = "train"
) -> dict[str, Path]:
    """Write known-shift pairs as ``train.jsonl`` / ``val.jsonl`` under ``out_dir``; returns their paths."""
    records = known_shift_records(out_dir, size, seed, pool)
    train, val = _split(records, val_fraction, seed)
    out = Path(out_dir)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}


def answer_fields(text: str) -> dict[str, str | None]:
    """``factor`` (the edit's attribute), ``value`` (how the sentence names the value and its factor),
    ``true``, ``pred`` and ``edit`` of a structured answer; ``None`` for a part that cannot be read."""
    from datamodules.sentences import split_answer

    cause, edit = split_answer(text)
    out: dict[str, str | None] = {"factor": None, "value": None, "true": None, "pred": None, "edit": edit}
    match = _EDIT.match(edit or "")
    if match is not None:
        out["factor"] = match.group("attribute")
    sentence = _SENTENCE.match(cause)
    if sentence is not None:
        out["value"] = f"{sentence.group('value')} {sentence.group('word')}"
        out["true"], out["pred"] = sentence.group("true"), sentence.group("pred")
    return out


def score_answer(generated: str, reference: str) -> dict[str, bool]:
    """Which parts of ``generated`` agree with ``reference`` (both structured answers): the factor (edit
    attribute), the value (the sentence's value and factor words, with the right factor), the classes (true
    and predicted), ``all`` three, and the ``exact`` text."""
    said, truth = answer_fields(generated), answer_fields(reference)
    if truth["factor"] is None or truth["value"] is None:
        raise UserInputError(f"reference answer {reference!r} is not a structured answer with an edit")
    factor = said["factor"] == truth["factor"]
    value = factor and said["value"] == truth["value"]
    classes = said["true"] == truth["true"] and said["pred"] == truth["pred"]
    return {
        "factor": factor,
        "value": value,
        "classes": classes,
        "all": factor and value and classes and said["edit"] == truth["edit"],
        "exact": generated.strip() == reference.strip(),
    }
