"""Write the labelled judge set ``nemo_train/nemo/data/judge_labels.jsonl`` from hand-written sentence templates.

Every template below was written for this set and states what its sentence does: which factors it blames
(after negations), whether it says something false about the image, and which factor its ``Edit:`` line
changes. The label follows from that by the grading rubric of docs/GRADING.md, never from a judge:

* 1: the true cause is the only blamed factor;
* 0.5: the cause and exactly one other factor are blamed (together, or hedged between them), and the two are
  not every factor of the sheet;
* 0: the cause is not blamed, three or more factors (or every factor) are, a claim about the image is false,
  or the Edit line changes a factor the text does not blame.

Run: ``python scripts/make_judge_labels.py`` (deterministic; the file is committed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from judge_label_heldout import HELD_OUT
from judge_label_paraphrases import PARAPHRASES, Item

OUT = Path(__file__).resolve().parents[1] / "nemo_train" / "nemo" / "data" / "judge_labels.jsonl"


@dataclass(frozen=True)
class Record:
    """One error of a generated benchmark: its image's attributes as value names, the classes and the cause."""

    benchmark: str
    true_class: str
    predicted_class: str
    attributes: dict
    cause: str


@dataclass(frozen=True)
class Sheet:
    """How sentences of one benchmark name factors and values (our words, using the fact sheet's vocabulary)."""

    object_word: str
    noun: dict  # factor -> the sheet's word
    alt_noun: dict  # factor -> another word of the sheet for it (a synonym)
    valued: dict  # factor -> {value: a phrase that asserts that value}
    edit_to: dict  # factor -> the value an edit sets
    factors: tuple


def _angle(v: int) -> str:
    return f"rotation of {abs(v)} degrees {'clockwise' if v < 0 else 'anticlockwise'}"


SHIFTS = Sheet(
    object_word="digit",
    noun={
        "color": "colour",
        "style": "stroke style",
        "angle": "rotation",
        "background": "background",
        "scale": "size",
        "position": "position",
    },
    alt_noun={
        "color": "hue",
        "style": "rendering",
        "angle": "orientation",
        "background": "backdrop",
        "scale": "scale",
        "position": "placement",
    },
    valued={
        "color": {c: f"{c} colour" for c in ("white", "red", "green", "blue", "yellow", "cyan", "magenta")},
        "style": {
            "solid": "solid strokes",
            "outline": "outlined strokes",
            "dotted": "dotted strokes",
            "blurred": "blurred strokes",
        },
        "angle": {v: _angle(v) for v in (-90, -45, 45, 90)},
        "background": {
            "plain": "plain background",
            "noise": "noisy background",
            "stripes": "striped background",
            "checker": "checkered background",
        },
        "scale": {"small": "small size", "normal": "normal size"},
        "position": {p: f"{p} position" for p in ("centre", "left", "right", "top", "bottom")},
    },
    edit_to={
        "color": "white",
        "style": "solid",
        "angle": "0",
        "background": "plain",
        "scale": "normal",
        "position": "centre",
    },
    factors=("color", "style", "angle", "background", "scale", "position"),
)
CMNIST = Sheet(
    object_word="digit",
    noun={"color": "colour", "angle": "rotation"},
    alt_noun={"color": "hue", "angle": "tilt"},
    valued={
        "color": {c: f"{c} colour" for c in ("red", "green", "blue", "orange", "grey", "purple", "pink")},
        "angle": {v: _angle(v) for v in (-30, -20, -15, -10, 10, 15, 20, 30)},
    },
    edit_to={"color": "red", "angle": "0"},
    factors=("color", "angle"),
)
CLEVR = Sheet(
    object_word="object",
    noun={"material": "material", "color": "colour", "size": "size"},
    alt_noun={"material": "surface finish", "color": "hue", "size": "scale"},
    valued={
        "material": {"metal": "metal material", "rubber": "rubber material"},
        "color": {c: f"{c} colour" for c in ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")},
        "size": {s: f"{s} size" for s in ("small", "medium", "large")},
    },
    edit_to={"material": "rubber", "color": "gray", "size": "small"},
    factors=("material", "color", "size"),
)
SHEETS = {"shifts": SHIFTS, "cmnist": CMNIST, "clevr": CLEVR}


def _shifts(t, p, cause, **changed) -> Record:
    attrs = {"digit": t, "color": "white", "style": "solid", "angle": "0", "background": "plain"}
    attrs |= {"scale": "normal", "position": "centre"}
    attrs |= {k: str(v) for k, v in changed.items()}
    return Record("shifts", t, p, attrs, cause)


RECORDS = [
    _shifts("3", "8", "color", color="red"),
    _shifts("7", "1", "style", style="dotted", position="left"),
    _shifts("4", "9", "angle", angle=-90),
    _shifts("2", "7", "angle", angle=45, position="top"),
    _shifts("5", "6", "background", background="stripes"),
    _shifts("0", "6", "scale", scale="small", position="right"),
    _shifts("9", "4", "background", background="noise", color="yellow", style="outline", angle=90, position="bottom"),
    _shifts("8", "3", "style", style="blurred", color="magenta", angle=-45, scale="small"),
    Record("cmnist", "3", "8", {"digit": "3", "color": "green", "angle": "15"}, "color"),
    Record("cmnist", "7", "2", {"digit": "7", "color": "blue", "angle": "-20"}, "color"),
    Record("cmnist", "1", "4", {"digit": "1", "color": "grey", "angle": "-10"}, "color"),
    Record("cmnist", "6", "0", {"digit": "6", "color": "orange", "angle": "30"}, "color"),
    Record("clevr", "cube", "cylinder", {"shape": "cube", "material": "metal", "color": "red", "size": "large"}, "material"),
    Record("clevr", "cube", "sphere", {"shape": "cube", "material": "metal", "color": "blue", "size": "small"}, "material"),
    Record("clevr", "sphere", "cube", {"shape": "sphere", "material": "rubber", "color": "yellow", "size": "medium"}, "material"),
    Record("clevr", "cylinder", "cube", {"shape": "cylinder", "material": "metal", "color": "brown", "size": "large"}, "material"),
]  # fmt: skip


def label(item: Item, record: Record, sheet: Sheet) -> float:
    """The rubric of docs/GRADING.md applied to what the template says it does."""
    blamed = set(item.blamed) or set(item.edit)
    if item.false or record.cause not in blamed or (item.edit and not set(item.edit) <= set(item.blamed or item.edit)):
        return 0.0
    if len(blamed) >= 3 or (len(blamed) > 1 and blamed == set(sheet.factors)):
        return 0.0
    return 1.0 if blamed == {record.cause} else 0.5


def _v(record: Record, factor: str) -> str:
    return record.attributes[factor]


def _valued(sheet: Sheet, record: Record, factor: str) -> str:
    value = _v(record, factor)
    key = int(value) if factor == "angle" else value
    return sheet.valued[factor].get(key, sheet.noun[factor])


def _wrong(sheet: Sheet, record: Record, factor: str) -> str:
    """A phrase asserting a value the image does not have (for an angle: the other direction)."""
    value = _v(record, factor)
    if factor == "angle":
        v = int(value)
        return _angle(-v) if v else _angle(45 if record.benchmark == "shifts" else 20)
    options = [k for k in sheet.valued[factor] if k != value]
    return sheet.valued[factor][options[len(value) % len(options)]]


def _others(sheet: Sheet, record: Record) -> list[str]:
    """Non-cause factors, those whose value on this image is described first (so phrases assert true values)."""
    others = [f for f in sheet.factors if f != record.cause]
    return sorted(others, key=lambda f: 0 if _valued(sheet, record, f) != sheet.noun[f] else 1)


def templates(record: Record, sheet: Sheet) -> list[Item]:
    t, p, c = record.true_class, record.predicted_class, record.cause
    obj = sheet.object_word
    o1, *rest = _others(sheet, record)
    o2 = rest[0] if rest else None
    n, alt = sheet.noun, sheet.alt_noun
    vc, vo1 = _valued(sheet, record, c), _valued(sheet, record, o1)
    a = "an" if p[0] in "8aeiou" else "a"
    ta = "an" if t[0] in "8aeiou" else "a"
    edit = sheet.edit_to
    items = [
        # the sheet's own words (the reference explainers' sentences)
        Item(f"The classifier read this {t} as {a} {p} because of the {vc}. Edit: {c} -> {edit[c]}", (c,), "sheet_words", edit=(c,)),
        Item(f"The classifier read this {t} as {a} {p} because of the {vc}.", (c,), "sheet_words"),
        Item(f"The {n[c]} of this {obj} made the classifier call it {a} {p}.", (c,), "sheet_words"),
        Item(f"The classifier read this {t} as {a} {p} because of the {vo1}. Edit: {o1} -> {edit[o1]}", (o1,), "wrong_factor", edit=(o1,)),
        Item(f"The {n[o1]} of the {obj} misled the classifier.", (o1,), "wrong_factor"),
        # no factor at all
        Item(f"The classifier made a mistake on this {t}.", (), "no_factor"),
        Item(f"The shape of this {obj} is ambiguous, so the model guessed {a} {p}.", (), "no_factor"),
        Item("The model is simply not robust enough for this image.", (), "no_factor"),
        # hedges
        Item(f"It may be the {n[c]} or perhaps the {n[o1]} that confused the classifier.", (c, o1), "hedge"),
        Item(f"Perhaps the {n[c]} is to blame for this error.", (c,), "hedge"),
        Item(f"The error probably comes from the {n[o1]}.", (o1,), "hedge"),
        Item(f"Either the {vo1} or the {vc} could explain why this {t} was read as {a} {p}.", (o1, c), "hedge"),
        # negations
        Item(f"It is not the {n[o1]} but the {n[c]} that misled the classifier.", (c,), "negation"),
        Item(f"The {vc}, not the {n[o1]}, made the classifier read this {t} as {a} {p}.", (c,), "negation"),
        Item(f"The {n[o1]} is not the problem here; the {vc} is.", (c,), "negation"),
        Item(f"Not the {n[c]} but the {n[o1]} caused this error.", (o1,), "negation"),
        Item(f"The {n[c]} did not matter; the {n[o1]} did.", (o1,), "negation"),
        Item(f"The classifier was not fooled by the {n[o1]}; the {n[c]} of this {t} did it.", (c,), "negation"),
        # several causes
        Item(f"Both the {vc} and the {vo1} pushed the classifier towards {p}.", (c, o1), "several_causes"),
        Item(f"A combination of {n[o1]} and {n[c]} made this {t} look like {a} {p}.", (o1, c), "several_causes"),
        # false claims
        Item(f"The classifier read this {t} as {a} {p} because of the {_wrong(sheet, record, c)}.", (c,), "false_claim", false=True),
        Item(f"The {n[c]} made the classifier read this {p} as {ta} {t}.", (c,), "false_claim", false=True),
        Item(f"The {vc} and the {_wrong(sheet, record, o1)} made it read this {t} as {a} {p}.", (c, o1), "false_claim", false=True),
        # contradictions: the text and its Edit line blame different factors
        Item(f"The classifier read this {t} as {a} {p} because of the {vc}. Edit: {o1} -> {edit[o1]}", (c,), "contradiction", edit=(o1,)),
        Item(f"The classifier read this {t} as {a} {p} because of the {vo1}. Edit: {c} -> {edit[c]}", (o1,), "contradiction", edit=(c,)),
        Item(f"The {n[c]} is to blame. Edit: change the {n[o1]} to {edit[o1]}", (c,), "contradiction", edit=(o1,)),
        # an edit that agrees with its text
        Item(f"The {n[c]} is to blame. Edit: change the {n[c]} to {edit[c]}", (c,), "sheet_words", edit=(c,)),
        # every factor
        Item("The error may come from the " + _listing([n[f] for f in sheet.factors]) + ".", sheet.factors, "everything"),
        Item(f"Its {_listing([_valued(sheet, record, f) for f in sheet.factors], 'and')} all made this {t} look like {a} {p}.", sheet.factors, "everything"),
        # class-free sentences (no class named): right when they name the cause truly
        Item(f"The {n[c]} of the {obj} caused the error. Edit: {c} -> {edit[c]}", (c,), "class_free", edit=(c,)),
        Item(f"The {n[o1]} of the {obj} caused the error. Edit: {o1} -> {edit[o1]}", (o1,), "class_free", edit=(o1,)),
        Item(f"The {_wrong(sheet, record, c)} of the {obj} caused the error.", (c,), "class_free", false=True),
        # synonyms of the factor words
        Item(f"The {alt[c]} of this {t} is what the classifier got wrong; it saw {a} {p}.", (c,), "synonym"),
        Item(f"The {alt[o1]} of this {t} is what the classifier got wrong; it saw {a} {p}.", (o1,), "synonym"),
        # paragraphs in the style of a multimodal model: a description first, then the blame
        Item(
            f"The image shows {ta} {t} in the middle of a small square frame. Its strokes are clearly visible and the "
            f"shape is complete. The classifier most likely predicted {p} because of the {vc}, which it has learned "
            f"to associate with that class.",
            (c,), "mllm_paragraph",
        ),
        Item(
            f"Looking at this image, I can see the {obj} and its outline quite clearly. The prediction of {p} was "
            f"probably caused by the {vo1} rather than by anything about the {obj}'s shape.",
            (o1,), "mllm_paragraph",
        ),
    ]  # fmt: skip
    if o2 is not None:
        vo2 = _valued(sheet, record, o2)
        items += [
            Item(f"It could be the {n[c]}, the {n[o1]} or the {n[o2]}.", (c, o1, o2), "hedge"),
            Item(f"The {vc}, the {vo1} and the {vo2} together made it look like {a} {p}.", (c, o1, o2), "several_causes"),
            Item(f"Neither the {n[o1]} nor the {n[o2]} matters here; the {vc} does.", (c,), "negation"),
            Item(
                f"The image shows {ta} {t} with a {vo2}. Nothing about its outline is unusual. The most likely reason "
                f"for the mistake is the {n[c]}: the classifier connects the {vc} with {p}.",
                (c,), "mllm_paragraph",
            ),
            Item(
                f"The {obj} in the picture is {ta} {t}. I think two things led the classifier to say {p}: the {vc} and "
                f"the {vo1}. The {n[o2]} does not seem to matter.",
                (c, o1), "mllm_paragraph",
            ),
        ]  # fmt: skip
    if (
        c != "angle" and _v(record, c) != edit[c]
    ):  # a contrast with the references the classifier gets right (the change-based baseline's words)
        v = _v(record, c)
        items += [
            Item(f"Compared with a correctly classified {t}, its {n[c]} is {v} where the reference is {edit[c]}.", (c,), "reference_contrast"),
            Item(f"Compared with a correctly classified {t}, its {n[c]} is {edit[c]} where the reference is {v}.", (c,), "reference_contrast", false=True),
        ]  # fmt: skip
    items += PARAPHRASES[record.benchmark](record, sheet)
    return items


def _listing(words: list[str], last: str = "or") -> str:
    return ", ".join(words[:-1]) + f" {last} " + words[-1] if len(words) > 1 else words[0]


def build() -> list[dict]:
    rows = []
    for record in RECORDS:
        sheet = SHEETS[record.benchmark]
        for item in templates(record, sheet):
            rows.append(
                {
                    "benchmark": record.benchmark,
                    "text": item.text,
                    "true_class": record.true_class,
                    "predicted_class": record.predicted_class,
                    "attributes": record.attributes,
                    "cause": record.cause,
                    "label": label(item, record, sheet),
                    "group": item.group,
                    "split": "dev",
                }
            )
    for index, text, value, group in HELD_OUT:
        record = RECORDS[index]
        rows.append(
            {"benchmark": record.benchmark, "text": text, "true_class": record.true_class,
             "predicted_class": record.predicted_class, "attributes": record.attributes, "cause": record.cause,
             "label": value, "group": group, "split": "held_out"}
        )  # fmt: skip
    return rows


def main() -> None:
    rows = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"{len(rows)} items -> {OUT}")


if __name__ == "__main__":
    main()
