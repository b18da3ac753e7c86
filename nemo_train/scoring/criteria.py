"""The failure factor of each NEMO benchmark, written down for judges (NEMO Sec. 4.1.2), and the prompts
an LLM judge reads.

:class:`FactorCriterion` holds what an LLM judge reads (``description``) and the closed vocabulary the
offline keyword judge matches (``keywords``, ``partial_keywords``). The generated benchmarks' criteria read
their factor's word, value names and spellings from the dataset's fact sheet and add only the judge's own
words (other colour words, surface descriptions). :data:`JUDGE_PROMPT` grades against a
benchmark's factor; :data:`GROUNDED_PROMPT` grades against one error's own cause and checks the explanation
against the image's known attributes. :func:`snap_score` and :func:`snap_grounding` read a judge's reply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from datamodules.fact_sheets import SHEETS
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


def _words(text: str) -> tuple[str, ...]:
    """A keyword vocabulary written as one comma-separated string (keywords may hold spaces)."""
    return tuple(word.strip() for word in text.split(","))


def _cause_word(dataset: str) -> str:
    """How a sentence names the planted cause of a generated dataset (its fact sheet's factor word)."""
    facts = SHEETS[dataset]
    return facts.factor(facts.cause).word


def _cause_words(dataset: str, more: str) -> tuple[str, ...]:
    """The keyword vocabulary of a generated dataset's planted cause: the fact sheet's factor name and word, its
    value names and their other spellings, then ``more`` (the judge's own words, comma-separated)."""
    facts = SHEETS[dataset]
    factor = facts.factor(facts.cause)
    spellings = [w for v in factor.values for w in factor.spellings.get(str(v), ())]
    sheet = [factor.name, factor.word, *map(str, factor.values), *spellings]
    return tuple(dict.fromkeys([*sheet, *_words(more)]))


CRITERIA: dict[str, FactorCriterion] = {
    "imagenet_r": FactorCriterion(
        name="rendition style",
        description=(
            "the artistic style or rendition of the image: that the object is shown as a painting, "
            "sketch, drawing, cartoon, graffiti, embroidery, origami, sculpture, toy, tattoo, video-game "
            "render or other non-photographic depiction, rather than as a real photograph"
        ),
        keywords=_words(
            "style, rendition, painting, painted, sketch, drawing, drawn, cartoon, graffiti, embroidery, "
            "origami, sculpture, toy, tattoo, artistic, illustration, video game, plush, stylized, stylised, "
            "art"
        ),
        partial_keywords=("texture", "simplified", "abstract", "unrealistic", "colors", "colours"),
    ),
    "objectnet": FactorCriterion(
        name="viewpoint, rotation or background",
        description=(
            "an unusual viewpoint, rotation or pose of the object (upside down, on its side, seen from "
            "above or behind) or an unusual background or setting for it"
        ),
        keywords=_words(
            "viewpoint, view, angle, rotation, rotated, upside down, sideways, on its side, pose, orientation, "
            "oriented, tilted, background, setting, perspective"
        ),
        partial_keywords=("context", "position", "placement", "surroundings", "cluttered", "scene"),
    ),
    "imagenet_d": FactorCriterion(
        name="background, texture or material",
        description=(
            "the background the object is placed in, or the texture or material the object is made of "
            "(for example a wooden, plastic, glass or woven version of the object)"
        ),
        keywords=_words(
            "background, texture, textured, material, made of, wooden, wood, plastic, glass, metal, metallic, "
            "woven, fabric, stone, paper, surface pattern"
        ),
        partial_keywords=("surface", "appearance", "pattern", "setting", "context", "finish"),
    ),
    "cmnist": FactorCriterion(
        name=_cause_word("cmnist"),
        description=(
            "the colour of the digit: that the classifier relied on the digit's colour (a colour typical "
            "of another class) rather than on its shape"
        ),
        keywords=_cause_words(
            "cmnist",
            "colours, colors, coloured, colored, colouring, coloring, hue, hues, reddish, greenish, bluish, "
            "yellowish, violet, teal, brown, white, black, turquoise, lime, olive, navy, crimson, scarlet",
        ),
        partial_keywords=("tint", "shade", "brightness", "bright", "dark", "appearance"),
    ),
    "clevr": FactorCriterion(
        name=_cause_word("clevr"),
        description=(
            "the material of the object: metal versus rubber, i.e. a shiny, reflective metallic surface "
            "versus a matte one"
        ),
        keywords=_cause_words(
            "clevr", "materials, shiny, matte, reflective, reflection, reflections, glossy, specular"
        ),
        partial_keywords=("surface", "texture", "finish", "lighting", "appearance"),
    ),
}


def criterion_key(name: str) -> str:
    """The :data:`CRITERIA` key a benchmark name looks up (``ImageNet-R`` -> ``imagenet_r``)."""
    return str(name).lower().replace("-", "_")


def get_criterion(name: str | FactorCriterion) -> FactorCriterion:
    """A criterion by dataset name (``imagenet_r``, ``objectnet``, ``imagenet_d``, ``cmnist``, ``clevr``)."""
    if isinstance(name, FactorCriterion):
        return name
    key = criterion_key(name)
    if key not in CRITERIA:
        raise UserInputError(f"unknown judge criterion {name!r}; expected one of {sorted(CRITERIA)}")
    return CRITERIA[key]


JUDGE_SYSTEM = (
    "You grade explanations of image-classifier mistakes. You decide whether an explanation names one "
    "given cause of failure. You answer with a single JSON object and nothing else."
)

#: The grading rubric every judge applies (docs/GRADING.md), as an LLM judge reads it.
RUBRIC = """- 1 if it blames that cause alone;
- 0.5 if it blames that cause together with exactly one other factor, or hedges between that cause and one other factor;
- 0 if it names no factor, does not blame that cause, blames three or more factors (a list of every possible factor explains nothing), or its "Edit:" line changes a different factor than the one its text blames (the text and its edit contradict each other).
A negated factor is not blamed ("not the colour but the rotation" blames only the rotation). Read the whole explanation, its "Edit:" line included."""

JUDGE_PROMPT = f"""A vision classifier labelled an image of a "{{true_label}}" as "{{predicted_label}}". Someone wrote this explanation of the mistake:

<explanation>
{{explanation}}
</explanation>

The images of this benchmark differ from ordinary photos in one known way, which is the real cause of the error:
{{factor}}

Grade how well the explanation names that cause:
{RUBRIC}
Judge only whether the cause is named, not the writing quality.

Reply with JSON only: {{{{"reasoning": "<one sentence>", "score": <1, 0.5 or 0>}}}}"""

GROUNDED_PROMPT = f"""A vision classifier labelled an image of a "{{true_label}}" as "{{predicted_label}}". Someone wrote this explanation of the mistake:

<explanation>
{{explanation}}
</explanation>

The image was generated, so its attributes are known exactly:
{{attributes}}

This particular error has one known cause: {{cause}}. The other attributes did not cause it.

Grade the explanation on two things.
"score": does it blame this error's own cause?
{RUBRIC}
Any false statement about the image (an attribute value that differs from the list above, in the text or in the "Edit:" line, or a wrong true or predicted class) also gives 0. Angles are in degrees, positive anticlockwise ("90 degrees clockwise" is -90); a number within half the step between the listed values is true.
"grounding": of the statements it makes about this image that the list above and the two class names can check, the share that are true, from 0 to 1; null if it makes no such statement. Do not check hypothetical statements or the new values an edit sets.

Reply with JSON only: {{{{"reasoning": "<one sentence>", "score": <1, 0.5 or 0>, "grounding": <0 to 1 or null>}}}}"""


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


def snap_grounding(value: Any) -> float | None:
    """A judge's raw grounding as a number in [0, 1], or ``None`` if it is not a number in that range (an
    off-scale grounding such as 1.4 is not clamped: :func:`read_grade` fails the reply)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        return None
    return float(value) if 0.0 <= float(value) <= 1.0 else None


def read_grade(reply: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """``(score, grounding, problem)`` of a judge's JSON reply; ``problem`` names what is off the scale (a score
    that is not 1 / 0.5 / 0, a grounding given but not a number in [0, 1]) and is ``None`` for a good reply."""
    score = snap_score(reply.get("score"))
    raw = reply.get("grounding")
    grounding = snap_grounding(raw)
    if score is None:
        return None, None, f"score {reply.get('score')!r} is not 1, 0.5 or 0"
    if raw is not None and grounding is None:
        return None, None, f"grounding {raw!r} is not a number from 0 to 1"
    return score, grounding, None
