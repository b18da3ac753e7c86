"""Caption pairs from a generator with a fact sheet, and how right a generated caption is, factor by factor.

Before a random-init explainer can explain an error it has to see what is in an image, as a real VLM learns
from captions before it is asked questions. :func:`build_shift_caption_pairs` writes such pairs for the shifts
digits: the image, the question :data:`CAPTION_PROMPT` (naming the digit's class, as the distillation question
does) and the fact sheet's caption of its attributes (:meth:`datamodules.facts.DatasetFacts.caption`). The
images mix the shift distribution (one factor off its typical value) and a training-like distribution without
gaps (several factors off at once), so every value of every factor, on every digit, is seen.

:func:`parse_caption` reads the value of each factor back from a caption, and :func:`caption_accuracy` scores
generated captions against reference ones per factor (the held-out caption accuracy).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch

from datamodules.explanations.builders import _save_png, _split
from datamodules.explanations.records import ExplanationRecord, write_records
from datamodules.facts import DatasetFacts
from nemo_train.errors import UserInputError

#: The question of a caption pair; it names the class, as the distillation question does, so that the
#: explainer learns to take the class from the question and the other factors from the image.
CAPTION_PROMPT = 'Describe this image of a "{class_name}".'
#: Generators whose fact sheet captions can be scored (the name selects the sheet).
CaptionFacts = Literal["shifts"]


def facts_named(name: CaptionFacts) -> DatasetFacts:
    """The fact sheet of a generator, by name."""
    if name == "shifts":
        from datamodules.shifts import FACTS

        return FACTS
    raise UserInputError(f"no fact sheet named {name!r}; expected one of ['shifts']")


def _phrases(facts: DatasetFacts) -> dict[str, dict[str, str]]:
    """``{attribute: {phrase: value name}}`` for the class attribute and every factor."""
    out = {facts.class_attribute: {name: name for name in facts.classes}}
    for factor in facts.factors:
        out[factor.name] = {factor.phrases.get(str(v), str(v)): str(v) for v in factor.values}
    return out


_Patterns = tuple[re.Pattern[str], dict[str, list[tuple[re.Pattern[str], str]]]]
_PATTERNS: dict[int, tuple[DatasetFacts, _Patterns]] = {}


def _patterns(facts: DatasetFacts) -> _Patterns:
    """The whole-caption pattern (template with one group per slot) and one pattern per phrase (cached)."""
    cached = _PATTERNS.get(id(facts))
    if cached is not None and cached[0] is facts:
        return cached[1]
    phrases = _phrases(facts)
    pieces, seen = [], set()
    for literal, slot, _, _ in string.Formatter().parse(facts.caption_template):
        pieces.append(re.escape(literal))
        if slot is not None:
            options = "|".join(re.escape(p) for p in sorted(phrases[slot], key=len, reverse=True))
            pieces.append(f"(?P={slot})" if slot in seen else f"(?P<{slot}>{options})")
            seen.add(slot)
    whole = re.compile("".join(pieces))
    single = {
        attribute: [(re.compile(rf"(?<![\w-]){re.escape(p)}(?![\w-])"), value) for p, value in table.items()]
        for attribute, table in phrases.items()
    }
    _PATTERNS[id(facts)] = (facts, (whole, single))
    return whole, single


def parse_caption(text: str, facts: DatasetFacts) -> dict[str, str | None]:
    """The value name of each attribute (class attribute first, then the factors) a caption states.

    A caption in the template's form is read slot by slot; any other text attribute by attribute: an attribute
    gets a value when exactly one of its values' phrases occurs as whole words, else ``None``.
    """
    whole, single = _patterns(facts)
    phrases = _phrases(facts)
    match = whole.fullmatch(text.strip())
    if match is not None:
        found = match.groupdict()
        return {a: phrases[a][found[a]] if a in found else None for a in phrases}
    out: dict[str, str | None] = {}
    for attribute, patterns in single.items():
        values = {value for pattern, value in patterns if pattern.search(text)}
        out[attribute] = values.pop() if len(values) == 1 else None
    return out


def caption_accuracy(generated: Sequence[str], references: Sequence[str], facts: DatasetFacts) -> dict[str, float]:
    """Share of generated captions that state the reference's value, per factor (and the class attribute),
    plus ``average``: the mean over the factors (the class attribute is reported, not averaged)."""
    if len(generated) != len(references):
        raise UserInputError(f"{len(generated)} generated captions for {len(references)} references")
    if not generated:
        raise UserInputError("no caption to score")
    hits: dict[str, int] = {}
    for text, reference in zip(generated, references):
        said, truth = parse_caption(text, facts), parse_caption(reference, facts)
        for attribute, value in truth.items():
            if value is None:
                raise UserInputError(f"reference caption {reference!r} does not state its {attribute}")
            hits[attribute] = hits.get(attribute, 0) + int(said[attribute] == value)
    result = {attribute: n / len(generated) for attribute, n in hits.items()}
    factors = [f.name for f in facts.factors]
    result["average"] = sum(result[f] for f in factors) / len(factors)
    return result


def _caption_images(
    size: int, shifted_share: float, seed: int, shift: str = "single"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``size`` shifts images (uint8) and their attributes: a ``shifted_share`` from the shift distribution (``shift``
    factors off per image), the rest from the gap-free training distribution, both on the training handwriting pool."""
    from datamodules.shifts import ShiftsDataModule

    n_shifted = round(shifted_share * size)
    n_typical = size - n_shifted
    data = ShiftsDataModule(gaps="none", train_size=max(n_typical, 10), test_size=10, seed=seed)
    data.setup()
    parts = [data.train_set] if n_typical else []
    if n_shifted:
        parts.append(data.shifted_split("train", n_shifted, seed + 1, shift=shift))
    images = torch.cat([p.images for p in parts])[:size]
    attrs = {k: torch.cat([p.attrs[k] for p in parts])[:size] for k in parts[0].attrs}
    return images, attrs


def build_shift_caption_pairs(
    out_dir: str | Path,
    size: int = 2000,
    seed: int = 0,
    val_fraction: float = 0.1,
    shifted_share: float = 0.5,
    shift: str = "single",
) -> dict[str, Path]:
    """Write shifts caption pairs (``train.jsonl`` / ``val.jsonl`` and PNGs under ``out_dir``).

    Each record holds the image, :data:`CAPTION_PROMPT` as its question, the fact-sheet caption as its answer,
    the true digit as ``label`` and ``cause`` ``"caption"``. Returns ``{"train": ..., "val": ...}``.
    """
    if size < 2:
        raise UserInputError(f"caption pairs size={size}; expected at least 2")
    if not 0.0 <= shifted_share <= 1.0:
        raise UserInputError(f"shifted_share={shifted_share}; expected a value in [0, 1]")
    facts = facts_named("shifts")
    images, attrs = _caption_images(size, shifted_share, seed, shift)
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(len(images)):
        sample_attrs = {k: v[i].item() for k, v in attrs.items()}
        records.append(
            ExplanationRecord(
                image=_save_png(images[i].float() / 255.0, out / "images" / f"{i:06d}.png"),
                explanation=facts.caption(sample_attrs),
                prompt=CAPTION_PROMPT.format(class_name=facts.classes[int(sample_attrs[facts.class_attribute])]),
                cause="caption",
                label=int(sample_attrs[facts.class_attribute]),
            )
        )
    train, val = _split(records, val_fraction, seed)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}


def caption_references(records: Sequence[ExplanationRecord], facts: DatasetFacts) -> list[ExplanationRecord]:
    """The records whose answer is a caption of the fact sheet (every attribute readable)."""
    keep = []
    for record in records:
        parsed = parse_caption(record.explanation or "", facts)
        if all(v is not None for v in parsed.values()):
            keep.append(record)
    return keep
