"""Hand-written paraphrases of each benchmark's cause for ``make_judge_labels.py`` (one module per file size rule).

Each :class:`Item` states what its sentence does: the factors it blames (after negations), whether it says
something false about the image, and the factors its ``Edit:`` line changes; the label follows by the rubric.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """A sentence and what it does: ``blamed`` factors (after negation), ``false`` claims, ``edit`` factors."""

    text: str
    blamed: tuple
    group: str
    false: bool = False
    edit: tuple = ()
    notes: list = field(default_factory=list)


def _shifts_paraphrases(r, sheet) -> list[Item]:
    t, p, c = r.true_class, r.predicted_class, r.cause
    a = "an" if p[0] in "8aeiou" else "a"
    v = r.attributes[c]
    if c == "color":
        out = [
            Item(f"The digit is drawn in {v}, a colour the model links with {p}s, so this {t} was called {a} {p}.", (c,), "paraphrase"),
            Item(f"Because this {t} is {v} rather than white, the classifier labelled it {a} {p}.", (c,), "paraphrase"),
            Item(f"If the digit were white instead of {v}, the classifier would read it correctly.", (c,), "paraphrase"),
            Item(f"Its {v} ink pushed the classifier to answer {p}.", (c,), "synonym"),
            Item(f"The digit is painted {v}, unlike the white digits seen in training.", (c,), "synonym"),
            Item("The digit is painted blue, unlike the white digits seen in training.", (c,), "false_claim", false=True),
        ]  # fmt: skip
    elif c == "style":
        word = {"dotted": "dotty", "blurred": "fuzzy", "outline": "hollow"}[v]
        out = [
            Item(f"This {t} is made of {v} strokes instead of solid ones, and the classifier has not learned to read them.", (c,), "paraphrase"),
            Item(f"Had the {t} been drawn with solid strokes, the model would not have said {p}.", (c,), "paraphrase"),
            Item(f"The {word} look of the lines made the classifier see {a} {p}.", (c,), "synonym"),
            Item(f"The way the digit is rendered, {v} rather than solid, confused the model.", (c,), "synonym"),
            Item(f"The strokes are solid, yet the model read this {t} as {a} {p}.", (c,), "false_claim", false=True),
        ]  # fmt: skip
    elif c == "angle":
        deg = int(v)
        way = "clockwise" if deg < 0 else "anticlockwise"
        other_way = "anticlockwise" if deg < 0 else "clockwise"
        side = "right" if deg < 0 else "left"
        near = abs(deg) - 5
        out = [
            Item(f"The digit is turned {abs(deg)} degrees {way}, and on its side it looks like {a} {p}.", (c,), "paraphrase"),
            Item(f"The {t} is tilted about {near} degrees {way}; upright it would have been read correctly.", (c,), "tolerance"),
            Item(f"The {t} is tilted roughly {abs(deg) + 5} degrees, which the classifier never saw in training.", (c,), "tolerance"),
            Item(f"The digit is rotated {abs(deg)} degrees {other_way}, so it was read as {a} {p}.", (c,), "clockwise", false=True),
            Item(f"The digit is rotated {abs(deg)} degrees {way}, so it was read as {a} {p}.", (c,), "clockwise"),
            Item(f"The digit leans {abs(deg)} degrees to the {side}, so the classifier said {p}.", (c,), "clockwise"),
            Item(f"The digit is tilted {abs(deg) + 40} degrees, far from upright, so it was read as {a} {p}.", (c,), "tolerance", false=True),
            Item(f"Its orientation, rotated by {deg} degrees, makes this {t} resemble {a} {p}.", (c,), "synonym"),
        ]  # fmt: skip
    elif c == "background":
        adj = {"stripes": "striped", "noise": "noisy", "checker": "checkered"}[v]
        syn = {"stripes": "stripy", "noise": "grainy", "checker": "chequered"}[v]
        out = [
            Item(f"The {adj} backdrop behind the {t} hides its shape, so the model saw {a} {p}.", (c,), "paraphrase"),
            Item(f"On a plain background this {t} would have been read correctly; the {adj} texture got in the way.", (c,), "paraphrase"),
            Item(f"The {syn} pattern behind the digit confused the classifier.", (c,), "synonym"),
            Item(f"The checkered background behind this {t} confused the classifier.", (c,), "false_claim", false=(v != "checker")),
        ]  # fmt: skip
    else:  # scale
        out = [
            Item(f"The digit is shrunk to a fraction of its usual size, so this {t} was taken for {a} {p}.", (c,), "paraphrase"),
            Item(f"This {t} is much smaller than the digits the model was trained on.", (c,), "paraphrase"),
            Item(f"The tiny {t} looks like {a} {p} to the classifier.", (c,), "synonym"),
            Item("The digit is small, not normal-sized, and so it was misread.", (c,), "negation"),
        ]  # fmt: skip
    return out


def _cmnist_paraphrases(r, sheet) -> list[Item]:
    t, p = r.true_class, r.predicted_class
    a = "an" if p[0] in "8aeiou" else "a"
    v, deg = r.attributes["color"], int(r.attributes["angle"])
    way = "clockwise" if deg < 0 else "anticlockwise"
    wrong_way = "anticlockwise" if deg < 0 else "clockwise"
    return [
        Item(f"The {v} strokes are typical of {p}s in the training data, so this {t} was read as {a} {p}.", ("color",), "paraphrase"),
        Item(f"In training every {t} was red, and this one is {v}; the classifier follows the colour, not the shape.", ("color",), "paraphrase"),
        Item(f"Its {v} tint is the reason the model said {p}.", ("color",), "synonym"),
        Item(f"The {t} is tilted {abs(deg)} degrees {way}, which is why it became {a} {p}.", ("angle",), "clockwise"),
        Item(f"The {t} is tilted {abs(deg)} degrees {wrong_way}, which is why it became {a} {p}.", ("angle",), "clockwise", false=True),
        Item(f"The {v} colour, not the slight tilt of about {abs(deg)} degrees, made the classifier say {p}.", ("color",), "negation"),
        Item(f"A {v} {t} like this one was never shown to the classifier in training, so it answered {p}.", ("color",), "paraphrase"),
    ]  # fmt: skip


def _clevr_paraphrases(r, sheet) -> list[Item]:
    t, p = r.true_class, r.predicted_class
    a = "an" if p[0] in "aeiou" else "a"
    v = r.attributes["material"]
    other = "rubber" if v == "metal" else "metal"
    look = "shiny, metallic" if v == "metal" else "matte rubber"
    wrong_look = "matte rubber" if v == "metal" else "shiny metallic"
    return [
        Item(f"The {look} surface of this {t} is what the classifier keys on, so it said {p}.", ("material",), "paraphrase"),
        Item(f"In training every {t} was {other}, and this one is {v}, so it was read as {a} {p}.", ("material",), "paraphrase"),
        Item(f"Made of {v}, the {t} reminded the classifier of {a} {p}.", ("material",), "synonym"),
        Item(f"The {wrong_look} surface of this {t} made the classifier say {p}.", ("material",), "false_claim", false=True),
        Item(f"It is the material, not the shape, that led the classifier to {p}.", ("material",), "negation"),
    ]  # fmt: skip


PARAPHRASES = {"shifts": _shifts_paraphrases, "cmnist": _cmnist_paraphrases, "clevr": _clevr_paraphrases}
