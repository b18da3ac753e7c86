"""Offline counterfactual prompt rewriting for the small CLIP trained on our generators' captions.

Counterfactual prompt intervention (*NEMO: Benchmarking Natural-Language Explanations of Vision Model
Errors*, 2026, Eq. 8) rewrites the zero-shot prompt of the true class so that it names the cue an
explanation identifies; a language model does the rewriting there. On generated benchmarks the
:class:`CaptionPromptRule` does it without one: it is a **rule, not a model**. It reads the attribute
values an explanation names (colour words, "shiny metal", "rotated 15 degrees", "upright" ...) and writes
the true class's prompt in the word order of the CLIP's training captions with those values:
"the digit three" -> "a green digit three", "a render of a cube" -> "a cube made of shiny metal".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from datamodules.captions import CAPTION_NAMES, TILT_WORDS, VOCABULARIES, tilt_index
from datamodules.fact_sheets import SHEETS
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample

#: Per generator: the class prompt with the attributes an explanation names, in the word order of the
#: CLIP's training captions ("a {color} digit {digit} {tilt}"); a bracketed part stays only when the
#: explanation names its attribute.
PROMPT_FORMS: dict[str, str] = {
    "cmnist": "a[ {color}] digit {digit}[ {tilt}]",
    "clevr": "a[ {size}][ {color}] {shape}[ made of {material}]",
}
#: Per generator, read from its fact sheet: the class attribute (caption words) and, for every factor an
#: explanation may name, its caption attribute (CMNIST rotations are captioned as three tilt words).
CAPTION_ATTRIBUTES: dict[str, tuple[str, dict[str, str]]] = {
    name: (
        SHEETS[name].class_attribute,
        {f.name: CAPTION_NAMES.get(name, {}).get(f.name, f.name) for f in SHEETS[name].factors},
    )
    for name in PROMPT_FORMS
}
#: Words that mean "not rotated" (tilt "upright").
UPRIGHT_WORDS = ("upright", "straight", "level", "unrotated", "not rotated")
_NUMBER_DEGREES = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)\s*(?:degrees?|deg\b|°)")


def _word_positions(text: str, word: str) -> list[int]:
    return [m.start() for m in re.finditer(r"\b" + re.escape(word.lower()) + r"\b", text)]


class CaptionPromptRule:
    """Rewrites the true class's zero-shot prompt with the attribute values an explanation names.

    A rule, **not a language model** (it stands in for the explainer's prompt rewrite when none is
    configured, and suits only explanations phrased in the generator's vocabulary). For every attribute
    but the class (CMNIST: colour, rotation; CLEVR: material, colour, size) it collects the values the
    explanation names, in order: vocabulary words ("green", "metal", "shiny metal", "small") and, for
    CMNIST rotations, "<n> degrees" (binned into the caption's tilt words like the training captions),
    "upright" and the tilt words. An explanation usually names the error's own value as the cue and
    other values as contrast ("the digit is green, while the 3s it resembles are mostly red"), so of the
    named values the rule takes the one the image has (it reads the error's generator attributes for this
    only), else the first one named: that prompt then describes the image wrongly and the CEI drops.
    Attributes named by a keyword without a value ("its colour") are left out; an explanation that names
    no value gets no rewrite (``None``, CEI 0).

    Args:
        generator: ``cmnist`` or ``clevr`` (whose caption vocabulary and word order the prompt follows).
        vocabulary: the generator's attribute values (``renderer.attributes``; names stored as indices).
    """

    stand_in = "caption rule, not a model"

    def __init__(self, generator: str, vocabulary: Mapping[str, Sequence]) -> None:
        if generator not in PROMPT_FORMS:
            raise UserInputError(
                f"the caption prompt rule knows the generators {sorted(PROMPT_FORMS)}, not {generator!r}; "
                "configure an explainer to rewrite prompts with a language model"
            )
        self.generator = generator
        self.words = VOCABULARIES[generator].words
        self.class_attribute, self.slots = CAPTION_ATTRIBUTES[generator]
        missing = [a for a in self.slots if a not in vocabulary]
        if missing:
            raise UserInputError(f"the {generator} vocabulary lacks attribute(s) {missing}")
        self.vocabulary = {k: list(v) for k, v in vocabulary.items()}
        self.form = PROMPT_FORMS[generator]

    # ------------------------------------------------------------------ reading the explanation
    def named_values(self, text: str, attribute: str) -> list[int]:
        """Caption-value indices of ``attribute`` that ``text`` names, in order of first mention."""
        text = text.lower().replace("−", "-")
        found: list[tuple[int, int]] = []
        if attribute == "angle":
            for m in _NUMBER_DEGREES.finditer(text):
                found.append((m.start(), int(tilt_index(torch.tensor(float(m.group(1)))))))
            for word in UPRIGHT_WORDS:
                found += [(p, TILT_WORDS.index("upright")) for p in _word_positions(text, word)]
            for i, word in enumerate(TILT_WORDS):
                found += [(p, i) for p in _word_positions(text, word)]
        else:
            caption_words = self.words[self.slots[attribute]]
            for i, (value, word) in enumerate(zip(self.vocabulary[attribute], caption_words)):
                for w in dict.fromkeys((str(value), word)):
                    found += [(p, i) for p in _word_positions(text, w)]
        return list(dict.fromkeys(i for _, i in sorted(found)))

    def image_value(self, attribute: str, attrs: Mapping[str, Any]) -> int:
        """The caption-value index of the image's ``attribute``."""
        value = attrs[attribute]
        return int(tilt_index(torch.tensor(float(value)))) if attribute == "angle" else int(value)

    def rewrite(self, hypothesis: str, label: int, attrs: Mapping[str, Any]) -> str | None:
        """The true class's prompt with the values ``hypothesis`` names, or ``None`` when it names none."""
        fill = {self.class_attribute: self.words[self.class_attribute][label]}
        for attribute, slot in self.slots.items():
            named = self.named_values(hypothesis, attribute)
            if named:
                own = self.image_value(attribute, attrs)
                fill[slot] = self.words[slot][own if own in named else named[0]]
        if len(fill) == 1:
            return None

        def keep(match: re.Match) -> str:
            part = match.group(1)
            slot = re.search(r"{(\w+)}", part).group(1)
            return part if slot in fill else ""

        return re.sub(r"\[([^\]]*)\]", keep, self.form).format(**fill)

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[str | None]:
        if sample.attrs is None:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no generator attributes; the caption prompt rule needs them"
            )
        return [self.rewrite(h, sample.label, sample.attrs) for h in hypotheses]
