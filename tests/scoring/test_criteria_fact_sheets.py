"""NEMO reads dataset facts from the fact sheets: the keyword deriver's stems and neutral values, the generated
benchmarks' criteria and their default bias presets are the sheets' and the datamodules', stated once."""

from __future__ import annotations

import inspect

import pytest

from datamodules.clevr import CLEVRDataModule
from datamodules.cmnist import CMNISTDataModule, CMNISTRenderer
from datamodules.fact_sheets import FACTOR_STEMS, NEUTRAL_VALUES, SHEETS, _by_factor_name
from datamodules.facts import DatasetFacts, Factor
from nemo_train.scoring.benchmark import SYNTHETIC
from nemo_train.scoring.criteria import CRITERIA
from nemo_train.scoring.interventions import KeywordAttributeDeriver


def test_stems_and_neutral_values_are_gathered_by_factor_name_from_the_sheets():
    stated = {(f.name, f.stems) for sheet in SHEETS.values() for f in sheet.factors if f.stems}
    assert {name for name, _ in stated} == set(FACTOR_STEMS) >= {"color", "angle", "material", "size"}
    assert stated == set(FACTOR_STEMS.items())  # one set of stems per factor name
    assert NEUTRAL_VALUES == {"angle": 0}  # an explanation that names only "rotation" means upright
    assert SHEETS["cmnist"].factor("angle").neutral == 0 and SHEETS["cmnist"].factor("color").neutral is None


def test_two_sheets_that_disagree_on_a_factor_name_are_an_error(monkeypatch):
    import datamodules.fact_sheets as fact_sheets

    def sheet(name, stems):
        return DatasetFacts(name, ("a", "b"), "label", "thing", (Factor("color", ("red",), "colour", stems=stems),))

    monkeypatch.setattr(fact_sheets, "SHEETS", {"x": sheet("x", ("hue",)), "y": sheet("y", ("tint",))})
    with pytest.raises(ValueError, match="factor 'color' has \\('tint',\\); another sheet has \\('hue',\\)"):
        _by_factor_name(lambda f: f.stems)
    monkeypatch.setattr(fact_sheets, "SHEETS", {"x": sheet("x", ("hue",)), "y": sheet("y", ())})
    assert _by_factor_name(lambda f: f.stems) == {"color": ("hue",)}  # a sheet that states none defers


def test_keyword_deriver_reads_the_sheets():
    shifts = SHEETS["shifts"]
    deriver = KeywordAttributeDeriver(dict(shifts.vocabulary), shifts.editable)
    assert deriver.keywords["angle"] == FACTOR_STEMS["angle"] and deriver.keywords["color"] == FACTOR_STEMS["color"]
    assert deriver.keywords["style"] == ("style",)  # no stems: the factor's name
    assert deriver.neutral == NEUTRAL_VALUES
    # "rotation" with no other angle falls back to the neutral value; the class attribute is never a stem owner
    assert KeywordAttributeDeriver(CMNISTRenderer.attributes).derive_one("Its slant misleads it.", {"angle": 10}) == {
        "attribute": "angle",
        "value": 0,
    }
    assert "digit" not in FACTOR_STEMS and "shape" not in FACTOR_STEMS


@pytest.mark.parametrize("dataset", ["cmnist", "clevr"])
def test_generated_criteria_name_the_sheets_cause_with_its_values(dataset):
    facts, criterion = SHEETS[dataset], CRITERIA[dataset]
    cause = facts.factor(facts.cause)
    assert criterion.name == cause.word
    spellings = {w for words in cause.spellings.values() for w in words}
    assert {cause.name, cause.word, *map(str, cause.values), *spellings} <= set(criterion.keywords)
    assert len(set(criterion.keywords)) == len(criterion.keywords)
    assert not set(criterion.keywords) & set(criterion.partial_keywords)


@pytest.mark.parametrize(("dataset", "datamodule"), [("cmnist", CMNISTDataModule), ("clevr", CLEVRDataModule)])
def test_synthetic_benchmarks_default_to_their_datamodules_bias_preset(dataset, datamodule):
    assert SYNTHETIC[dataset]["bias"] == inspect.signature(datamodule).parameters["bias"].default
    assert SYNTHETIC[dataset]["facts"] is SHEETS[dataset]
