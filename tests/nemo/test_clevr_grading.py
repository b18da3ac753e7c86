"""CLEVR is graded against its fact sheet, as CMNIST and the shifts digits are: the grounded judge reads which
factors a sentence blames and checks its claims against the image's attributes, instead of matching the material
criterion's keywords. Every expected value below is worked out by hand from the sheet (datamodules/clevr.py)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
import torch

from datamodules.clevr import ATTRIBUTES, COLOR_NAMES, MATERIALS, SHAPES, SIZE_NAMES
from datamodules.fact_sheets import SHEETS
from nemo_train.nemo.methods.reference import DistractorExplainer, KnownCauseExplainer
from nemo_train.scoring.benchmark import FACT_SHEETS, SYNTHETIC, ErrorSample, NemoBenchmark
from nemo_train.scoring.grounding import ClaimParser
from nemo_train.scoring.judges import GroundedJudge, JudgeItem

CLEVR = SHEETS["clevr"]
#: a large red metal cube read as a cylinder: a bias-conflicting error of the rubber model (every error is metal)
ATTRS = {
    "shape": SHAPES.index("cube"),
    "material": MATERIALS.index("metal"),
    "color": COLOR_NAMES.index("red"),
    "size": SIZE_NAMES.index("large"),
}
#: the KnownCause sentence of this error, as the reference explainer writes it
KNOWN = (
    "The classifier relies on material: in training every cube was rubber, and this one is metal, "
    "so it was read as another object."
)
#: the Distractor(size) sentence of this error: the sheet's structured sentence and edit
DISTRACTOR = "The classifier read this cube as a cylinder because of the large size. Edit: size -> small"


def test_every_generated_benchmark_is_graded_against_its_sheet():
    assert FACT_SHEETS == {name: SHEETS[name] for name in ("cmnist", "clevr", "shifts")}
    assert all(FACT_SHEETS[name] is spec["facts"] for name, spec in SYNTHETIC.items())
    judge = GroundedJudge().for_benchmark("clevr", FACT_SHEETS["clevr"])
    assert judge.facts is CLEVR and judge.criterion.name == "material"  # the criterion names the sheet's cause
    assert judge.fingerprint()["facts"] == "clevr"  # results graded the old way are recomputed, not resumed


def test_the_reference_explainers_write_these_sentences_from_the_sheet():
    cause = {
        "attribute": "material",
        "values": {k: ["rubber"] for k in range(3)},
        "distractor": "size",
        "object": "object",
    }
    bench = NemoBenchmark("clevr", list(SHAPES), "clevr", [], None, None, dict(ATTRIBUTES), cause, FACT_SHEETS["clevr"])
    error = ErrorSample("clevr-00000", torch.zeros(3, 8, 8), 0, 1, ATTRS)
    assert bench.known_attributes(error) == {"shape": "cube", "material": "metal", "color": "red", "size": "large"}
    assert KnownCauseExplainer().explain(error, bench).text == KNOWN
    assert DistractorExplainer("size").explain(error, bench).text == DISTRACTOR


def grade(text: str, facts=CLEVR) -> tuple[float, float | None]:
    """(LLM Match, grounding) of one sentence about the red metal cube read as a cylinder; ``facts=None`` is the
    grading before 27 Nov 2026 (the material criterion's keywords, only class claims checked)."""
    judge = GroundedJudge().for_benchmark("clevr", facts)
    attributes = None if facts is None else CLEVR.value_names(ATTRS)
    (verdict,) = judge.judge([JudgeItem(text, "cube", "cylinder", attributes=attributes)])
    return verdict.score, verdict.grounding


@pytest.mark.parametrize(
    ("text", "sheet", "keywords"),
    [
        # the known cause: material blamed alone, its one asserted value (metal) true; "rubber" is in the
        # training clause (hedged), so it is no claim about this image
        (KNOWN, (1.0, 1.0), (1.0, None)),
        # the distractor names size only; its three claims (this cube, as a cylinder, large) are true
        (DISTRACTOR, (0.0, 1.0), (0.0, 1.0)),
        ("size", (0.0, None), (0.0, None)),
        # the teacher's sentence: material alone, claims cube / cylinder / metal true
        ("The classifier read this cube as a cylinder because of the metal material. Edit: material -> rubber",
         (1.0, 1.0), (1.0, 1.0)),
        # a false value: the image is metal, not rubber; the keywords only saw "material"
        ("This rubber object fooled it.", (0.0, 0.0), (1.0, None)),
        # material among another factor: half marks; with a false colour nothing ("shiny" is the sheet's other
        # spelling of metal since 27 Nov 2026: one more true claim, 3 of 4)
        ("The shiny red metal cube was read as a cylinder.", (0.5, 1.0), (1.0, 1.0)),
        ("The shiny blue metal cube was read as a cylinder.", (0.0, 3 / 4), (1.0, 1.0)),
        # "surface" and "finish" are the sheet's words for material (the criterion only half-credited them)
        ("Its surface finish misled the classifier.", (1.0, None), (0.5, None)),
        # words the criterion alone held: lighting half-credited, reflective / glossy fully; the sheet now spells
        # metal as reflective and glossy too (since 27 Nov 2026; before: no factor, 0), two true claims
        ("The lighting made it hard to see.", (0.0, None), (0.5, None)),
        ("The reflective, glossy look misled it.", (1.0, 1.0), (1.0, None)),
        # "metallic" is the sheet's other spelling of metal: a true claim about the material
        ("The metallic sheen made the cylinder look like a cube.", (1.0, 1.0), (1.0, None)),
    ],
)  # fmt: skip
def test_clevr_sentences_are_graded_against_the_sheet(text, sheet, keywords):
    assert grade(text) == pytest.approx(sheet)
    assert grade(text, facts=None) == pytest.approx(keywords)


def test_a_constant_sentence_scores_what_the_known_cause_scores_on_clevr():
    """Every bias-conflicting error of the rubber model is a metal object, so the most frequent KnownCause sentence
    (another class's) is true of every error: on CLEVR a constant maxes the metric out, unlike on CMNIST, where
    each error has its own colour. A constant naming the distractor gets nothing."""
    constant = KNOWN.replace("every cube", "every sphere")
    assert grade(constant) == (1.0, 1.0)
    judge = GroundedJudge(CLEVR, criterion="clevr")
    for k, shape in enumerate(SHAPES):  # true of a metal error of every class
        attributes = CLEVR.value_names({**ATTRS, "shape": k})
        item = JudgeItem(constant, shape, SHAPES[(k + 1) % 3], attributes=attributes)
        assert judge.judge([item])[0].score == 1.0
    assert grade("The object's size misleads the classifier.") == (0.0, None)


def test_other_spellings_on_the_sheet_are_claims_about_their_value():
    attributes = CLEVR.value_names({**ATTRS, "color": COLOR_NAMES.index("gray")})
    reading = ClaimParser(CLEVR).read("A grey metallic cube.", attributes)
    assert reading.blamed == ("color", "material")
    assert [(c.subject, c.said, c.holds) for c in reading.claims] == [
        ("color", "gray", True),
        ("material", "metal", True),
    ]


def test_nemo_eval_on_clevr_adds_the_constant_row(tmp_path, lightning_checkpoint):
    """End to end on an untrained CNN (4 errors): the sheet gives CLEVR the Constant row, and the known cause, the
    constant and the distractor score 1, 1 and 0."""
    from nemo_train.models import ClassifierModule
    from nemo_train.nemo.components import BenchmarkArgs, DistractorMethod, KnownCauseMethod
    from nemo_train.nemo.run import nemo_eval

    torch.manual_seed(0)
    ckpt = lightning_checkpoint(ClassifierModule(backbone="bias_cnn", num_classes=3), tmp_path / "clevr" / "best.ckpt")
    args = BenchmarkArgs(name="clevr", n=4, test_styles=1, data_kwargs={"image_size": 32})
    result = nemo_eval(args, [ckpt], [KnownCauseMethod(), DistractorMethod()], out_dir=str(tmp_path / "out"))
    cells = {c.method: c for c in result.cells}
    assert set(cells) == {"KnownCause", "Distractor(size)", "Constant"}
    assert (cells["KnownCause"].llm_match, cells["Constant"].llm_match, cells["Distractor(size)"].llm_match) == (
        1.0,
        1.0,
        0.0,
    )
