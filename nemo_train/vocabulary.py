"""Shared words of the toolkit: the six causes of low competency, their reference explanations, the
explainer's questions, and matching cause names in free text.

A leaf module (imports nothing from the toolkit), so data builders, models, capabilities and callbacks
use one vocabulary. The questions follow the prompts of "Explaining Low Competency of Image Classifiers
with Counterfactuals" (2025), in our own words.

An explanation is *correct* for a cause when it names that cause and no other one
(:func:`causes_named` finds the causes a text names with a keyword pattern per cause), so an answer that
lists every cause is not credited.
"""

from __future__ import annotations

import math
import re

#: The six causes of low competency, in the order of their group index.
CAUSES: tuple[str, ...] = ("spatial", "brightness", "contrast", "saturation", "noise", "pixelation")

#: Context given to the model before the question (for CMNIST).
SYSTEM_PROMPT = (
    "You explain the mistakes of an image classifier. The classifier was trained on small images of "
    "handwritten digits drawn in colour. A competency estimator scores how likely each prediction is to be right."
)
#: The question for one image.
SINGLE_IMAGE_PROMPT = (
    "The classifier is not confident on this image. In one sentence, say what about the image causes it."
)
#: The question for an image and its counterfactual side by side.
PAIR_PROMPT = (
    "On the left is an image the classifier is not confident on; on the right is a similar image it is confident on. "
    "In one sentence, say what about the left image causes the low confidence."
)
#: The question for a CMNIST bias-conflicting error.
BIAS_PROMPT = "The classifier got this image wrong. In one sentence, say what about the image misled it."

#: Reference explanations per cause of low competency (default directions of ``apply_cause``).
EXPLANATIONS: dict[str, tuple[str, ...]] = {
    "spatial": (
        "The image contains an unfamiliar object that the classifier never saw during training.",
        "A foreign object pasted into the image confuses the classifier.",
    ),
    "brightness": (
        "The image is much brighter than the training images.",
        "The image is over-exposed, so everything looks too bright.",
    ),
    "contrast": (
        "The image has too little contrast.",
        "The contrast of the image is too low, so the digit barely stands out.",
    ),
    "saturation": (
        "The image is under-saturated.",
        "The image has lost its saturation, so the stroke looks grey.",
    ),
    "noise": (
        "The image is covered in random noise.",
        "Strong noise hides the shape of the digit.",
    ),
    "pixelation": (
        "The image is pixelated.",
        "The image is pixelated and has lost its fine detail.",
    ),
}

#: Keyword pattern per cause (the planted CMNIST bias, colour, included).
CAUSE_PATTERNS: dict[str, re.Pattern[str]] = {
    "spatial": re.compile(r"\b(object|anomal\w*|unfamiliar|foreign|patch)\b", re.I),
    "brightness": re.compile(r"\b(bright\w*|dark\w*|over-?exposed|exposure)\b", re.I),
    "contrast": re.compile(r"\bcontrast\w*\b", re.I),
    "saturation": re.compile(r"\b(\w*-?saturat\w*|desaturat\w*)\b", re.I),
    "noise": re.compile(r"\b(nois\w*|grain\w*|speckl\w*)\b", re.I),
    "pixelation": re.compile(r"\b(pixel\w*|blocky|low[- ]resolution)\b", re.I),
    "color": re.compile(r"\b(colou?r\w*)\b", re.I),
}


def causes_named(text: str) -> set[str]:
    """The causes (keys of :data:`CAUSE_PATTERNS`) that ``text`` names."""
    return {cause for cause, pattern in CAUSE_PATTERNS.items() if pattern.search(text)}


def predicted_cause(text: str, candidates: tuple[str, ...] = CAUSES) -> str | None:
    """The single cause among ``candidates`` that ``text`` names, or ``None`` (none or several named)."""
    named = causes_named(text) & set(candidates)
    return named.pop() if len(named) == 1 else None


def is_correct(text: str, cause: str, candidates: tuple[str, ...] = CAUSES) -> bool:
    """Whether ``text`` names ``cause`` and no other of ``candidates``."""
    return predicted_cause(text, candidates) == cause


def bias_explanation(color: str, label: int | str, prediction: int | str, aligned_digits: list[int]) -> str:
    """Reference explanation of a CMNIST bias-conflicting error: the planted colour bias misled the classifier."""
    digits = ", ".join(str(d) for d in aligned_digits)
    return (
        f"The {color} colour of the stroke misled the classifier: in training only digits {digits} were {color}, "
        f"so it predicted {prediction} instead of {label}."
    )


def per_cause_accuracy(true_causes: list[str], texts: list[str], causes: tuple[str, ...] = CAUSES) -> dict[str, float]:
    """Accuracy per cause and their mean (``"average"``).

    Causes absent from ``true_causes`` get ``nan`` and are left out of the average.
    """
    result: dict[str, float] = {}
    for cause in causes:
        hits = [is_correct(t, cause, causes) for c, t in zip(true_causes, texts) if c == cause]
        result[cause] = sum(hits) / len(hits) if hits else math.nan
    present = [v for v in result.values() if not math.isnan(v)]
    result["average"] = sum(present) / len(present) if present else math.nan
    return result


def cause_candidates(cause: str) -> tuple[str, ...]:
    """The causes an explanation of ``cause`` is matched against: the six, plus ``cause`` if it is another one."""
    return CAUSES if cause in CAUSES else (*CAUSES, cause)
