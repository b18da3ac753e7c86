"""The fact sheet of the six causes of low competency (competency-counterfactuals paper, Sec. 3.2).

The six-cause set (:mod:`datamodules.six_causes`) corrupts the images of another generator (CMNIST first) with
one known cause each. Its "factors" are the six causes: how a sentence names each (word and synonyms, as whole
words) and the values an explanation may claim about the image (``over-exposed`` / ``dark`` for brightness,
``low contrast`` / ``high contrast`` ...). The offline grounded judge (an attribute parser, not a model:
:class:`nemo_train.scoring.judges.GroundedJudge`) reads explanations of low competency against this sheet: an
explanation is right when it blames the true cause alone, and a claim that inverts the cause ("the image is too
dark" of an over-exposed image) is false and scores 0. :func:`cause_attributes` gives a corrupted image's one
known attribute (its cause, in the direction it was applied).

The sheet has no classes and no caption: the class comes from the source generator, and nothing is rendered
from it.
"""

from __future__ import annotations

from datamodules.facts import DatasetFacts, Factor
from datamodules.six_causes import DEFAULT_DIRECTIONS
from nemo_train.errors import UserInputError
from nemo_train.vocabulary import CAUSES

#: The value each cause takes on an image, by the direction it was applied (``None``: the cause has one).
CAUSE_VALUES: dict[str, dict[str | None, str]] = {
    "spatial": {None: "foreign object"},
    "brightness": {"up": "over-exposed", "down": "dark"},
    "contrast": {"up": "high contrast", "down": "low contrast"},
    "saturation": {"up": "over-saturated", "down": "under-saturated"},
    "noise": {None: "noisy"},
    "pixelation": {None: "pixelated"},
}

FACTS = DatasetFacts(
    name="six_causes",
    classes=(),
    class_attribute="label",
    object_word="image",
    factors=(
        Factor(
            "spatial",
            ("foreign object",),
            "unfamiliar object",
            ("object", "objects", "anomaly", "anomalies", "anomalous", "unfamiliar", "foreign", "patch", "spatial"),
            spellings={"foreign object": ("foreign objects", "unfamiliar object", "pasted object")},
        ),
        Factor(
            "brightness",
            ("over-exposed", "dark"),
            "brightness",
            ("bright", "brightness", "brightened", "exposure", "exposed", "lighting", "illumination"),
            spellings={
                "over-exposed": ("overexposed", "too bright", "brighter", "very bright"),
                "dark": ("darker", "too dark", "darkened", "underexposed", "under-exposed", "dim"),
            },
        ),
        Factor(
            "contrast",
            ("low contrast", "high contrast"),
            "contrast",
            ("contrast", "contrasts", "contrasted"),
            spellings={
                "low contrast": ("little contrast", "reduced contrast", "washed-out", "washed out"),
                "high contrast": ("strong contrast", "increased contrast", "harsh contrast"),
            },
        ),
        Factor(
            "saturation",
            ("under-saturated", "over-saturated"),
            "saturation",
            ("saturation", "saturated"),
            spellings={
                "under-saturated": ("undersaturated", "desaturated", "unsaturated", "lost its saturation"),
                "over-saturated": ("oversaturated", "too saturated", "overly saturated"),
            },
        ),
        Factor(
            "noise",
            ("noisy",),
            "noise",
            ("noise", "grain", "grains", "speckle", "speckles", "static"),
            spellings={"noisy": ("grainy", "speckled", "random noise")},
        ),
        Factor(
            "pixelation",
            ("pixelated",),
            "pixelation",
            ("pixelation", "pixels", "pixel", "resolution", "blocks"),
            spellings={"pixelated": ("pixellated", "blocky", "low-resolution", "low resolution")},
        ),
    ),
)


def cause_attributes(cause: str, direction: str | None = None) -> dict[str, str]:
    """The known attribute of an image corrupted by ``cause`` (``{"brightness": "over-exposed"}``), the value
    by the direction it was applied (``up`` / ``down``; the default direction of :mod:`datamodules.six_causes`
    when ``None``)."""
    if cause not in CAUSE_VALUES:
        raise UserInputError(f"unknown cause {cause!r}; expected one of {list(CAUSES)}")
    values = CAUSE_VALUES[cause]
    key = None if None in values else (direction or DEFAULT_DIRECTIONS[cause])
    return {cause: values[key]}
