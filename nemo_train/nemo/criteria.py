"""The failure factor of each NEMO benchmark, written down for judges (NEMO Sec. 4.1.2).

:class:`FactorCriterion` holds what an LLM judge reads (``description``) and the closed vocabulary the
offline keyword judge matches (``keywords``, ``partial_keywords``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nemo_train.errors import UserInputError


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


_COLOUR_WORDS = _words(
    "colour, color, colours, colors, coloured, colored, colouring, coloring, hue, hues, red, reddish, green, "
    "greenish, blue, bluish, yellow, yellowish, orange, purple, violet, magenta, pink, cyan, teal, brown, grey, "
    "gray, white, black, turquoise, lime, olive, navy, crimson, scarlet"
)

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
        name="colour",
        description=(
            "the colour of the digit: that the classifier relied on the digit's colour (a colour typical "
            "of another class) rather than on its shape"
        ),
        keywords=_COLOUR_WORDS,
        partial_keywords=("tint", "shade", "brightness", "bright", "dark", "appearance"),
    ),
    "clevr": FactorCriterion(
        name="material",
        description=(
            "the material of the object: metal versus rubber, i.e. a shiny, reflective metallic surface "
            "versus a matte one"
        ),
        keywords=_words(
            "material, materials, metal, metallic, rubber, shiny, matte, reflective, reflection, reflections, "
            "glossy, specular"
        ),
        partial_keywords=("surface", "texture", "finish", "lighting", "appearance"),
    ),
}


def get_criterion(name: str | FactorCriterion) -> FactorCriterion:
    """A criterion by dataset name (``imagenet_r``, ``objectnet``, ``imagenet_d``, ``cmnist``, ``clevr``)."""
    if isinstance(name, FactorCriterion):
        return name
    key = str(name).lower().replace("-", "_")
    if key not in CRITERIA:
        raise UserInputError(f"unknown judge criterion {name!r}; expected one of {sorted(CRITERIA)}")
    return CRITERIA[key]
