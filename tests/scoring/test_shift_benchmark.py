"""The shifts benchmark end to end on a quickly trained gap classifier: causes checked by re-rendering, the
known cause and a constant judged against each image, nemo-eval and distill-teacher with per-error causes."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from training_seed import TRAINING_SEED

from nemo_train.models.targets import load_checkpoint_target
from nemo_train.nemo.evaluation import score_explanation
from nemo_train.nemo.methods.reference import ConstantExplainer, KnownCauseExplainer
from nemo_train.scoring.benchmark import FACT_SHEETS
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.scoring.judges import GroundedJudge, JudgePanel
from nemo_train.scoring.shift_benchmark import UNEXPLAINED, build_shift_benchmark, cause_shares, cause_table


@pytest.fixture(scope="module")
def gap_classifier(tmp_path_factory, lightning_checkpoint):
    """A gaps_a classifier trained for a few seconds, and its checkpoint path."""
    from datamodules.shifts import ShiftsDataModule
    from nemo_train.models import ClassifierModule
    from nemo_train.models.trainer import quiet_trainer

    L.seed_everything(TRAINING_SEED, verbose=False)
    datamodule = ShiftsDataModule(gaps="gaps_a", train_size=2000, test_size=200, batch_size=64)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)
    quiet_trainer(max_epochs=2).fit(module, datamodule)
    module.eval()
    path = lightning_checkpoint(module, tmp_path_factory.mktemp("shifts") / "shifts_gaps_a" / "best.ckpt")
    return load_checkpoint_target(path), path


@pytest.fixture(scope="module")
def bench(gap_classifier):
    module, _ = gap_classifier
    return build_shift_benchmark(module, "gaps_a", n=20, seed=0, size=600)


def test_every_error_has_the_cause_that_re_rendering_establishes(bench, gap_classifier):
    module, _ = gap_classifier
    facts = bench.facts
    assert bench.errors and len(bench.errors) <= 20
    for sample in bench.errors:
        assert sample.prediction != sample.label
        factor = facts.factor(sample.cause)
        assert not factor.distractor and sample.attrs[sample.cause] != factor.typical_stored
        fixed = dict(sample.attrs, **{sample.cause: factor.typical_stored})
        image = bench.renderer.render(**fixed)
        assert int(module.predict(image[None])[0]) == sample.label  # the single re-render gives the true class
        original = bench.renderer.render(**sample.attrs)
        assert torch.allclose(original, sample.image, atol=1 / 255)


def test_cause_counts_and_shares(bench):
    counts = bench.cause_counts
    causes = {f.name for f in bench.facts.factors if not f.distractor}
    assert set(counts) <= causes | set(UNEXPLAINED) and set(counts) & causes
    assert {sample.cause for sample in bench.errors} <= set(counts) - set(UNEXPLAINED)
    single = sum(v for k, v in counts.items() if k not in UNEXPLAINED)
    shares = cause_shares(counts)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(share == pytest.approx(counts[cause] / single) for cause, share in shares.items())
    table = {cause: errors for cause, errors, _ in cause_table(counts)}
    assert table == {**{k: 0 for k in UNEXPLAINED}, **counts}


def test_references_are_training_like_images(bench):
    """The reference database is the classifier's training distribution, not the rest of the shift split."""
    from datamodules.shifts import GapSpec

    gaps = GapSpec.parse("gaps_a")
    typical = {f.name: f.typical_stored for f in bench.facts.factors if f.typical is not None}
    for attrs, label in zip(bench.reference.attrs, bench.reference.labels.tolist()):
        for factor, digits in gaps.gaps.items():
            if label in digits:
                assert attrs[factor] == typical[factor]


def test_known_cause_gets_full_marks_and_a_constant_does_not(bench, gap_classifier):
    module, _ = gap_classifier
    facts = bench.facts
    panel = JudgePanel([GroundedJudge().for_benchmark("shifts", facts)])
    deriver = KeywordAttributeDeriver(bench.vocabulary, bench.cause["editable"])
    scorer = CounterfactualScorer(module, deriver, ExactAttributeEditor(bench.renderer))
    known = [
        score_explanation("KnownCause", KnownCauseExplainer().explain(s, bench), s, bench, scorer, panel, "t")[0]
        for s in bench.errors
    ]
    assert all(r["llm_match"] == 1.0 and r["grounding"] == 1.0 for r in known)
    assert all(r["cei"] > 0 for r in known)  # the stated edit is the one that fixes the error
    constant = ConstantExplainer(known[0]["explanation"])
    scored = [
        score_explanation("Constant", constant.explain(s, bench), s, bench, scorer, panel, "t")[0] for s in bench.errors
    ]
    first = bench.errors[0]
    for sample, record in zip(bench.errors, scored):
        if (sample.label, sample.prediction) != (first.label, first.prediction):
            assert record["llm_match"] == 0.0 and record["grounding"] < 1.0  # a false class claim


def test_nemo_eval_and_teacher_on_shifts(gap_classifier, tmp_path, capsys):
    from nemo_train.nemo.components import BenchmarkArgs, KnownCauseMethod, SciTXMethod
    from nemo_train.nemo.distill.labelling import distill_teacher
    from nemo_train.nemo.run import nemo_eval

    _, path = gap_classifier
    summary = nemo_eval(
        benchmark=BenchmarkArgs(name="shifts", n=8, data_kwargs={"test_size": 600}),
        targets=[path],
        methods=[SciTXMethod(), KnownCauseMethod()],
        out_dir=str(tmp_path / "eval"),
    )
    methods = {c.method: c for c in summary.cells}
    assert set(methods) == {"SciTX", "KnownCause", "Constant"}
    assert methods["KnownCause"].llm_match == 1.0 and methods["KnownCause"].grounding == 1.0
    assert summary.cause_counts["shifts_gaps_a"]
    printed = capsys.readouterr().out
    assert "grounding" in printed and "Causes of shifts_gaps_a" in printed

    result = distill_teacher(
        path, dataset="shifts", bias="gaps_a", out_dir=str(tmp_path / "teacher"), n=12, views=["error"]
    )
    assert result["labels"] >= 1
    pairs = [json.loads(line) for line in open(result["train"])] + [json.loads(line) for line in open(result["val"])]
    assert pairs and all(p["cause"] in bench_factors() for p in pairs)
    assert all("Edit:" in json.loads(p["explanation"])["cause_of_error"] for p in pairs)


def bench_factors() -> list[str]:
    return FACT_SHEETS["shifts"].factor_names


def test_on_cmnist_the_old_constant_gets_zero_and_the_teacher_full_marks():
    """Today's constant sentence on a green 0 read as 8: every claim false; the teacher's sentence for it: 1."""
    from types import SimpleNamespace

    from datamodules.cmnist import COLOR_NAMES, FACTS
    from datamodules.sentences import hypothesis_sentence
    from nemo_train.scoring.judges import JudgeItem

    judge = GroundedJudge().for_benchmark("cmnist", FACTS)
    attrs = {"digit": 0, "color": COLOR_NAMES.index("green"), "angle": 10}
    known = FACTS.value_names(attrs)
    constant = "The cyan colour makes the classifier read this 1 as a 6. Edit: color -> red"
    (verdict,) = judge.judge([JudgeItem(constant, "0", "8", attributes=known)])
    assert verdict.score == 0.0 and verdict.grounding == 0.0
    sample = SimpleNamespace(label=0, prediction=8, attrs=attrs)
    edit = {"attribute": "color", "value": COLOR_NAMES.index("red")}
    teacher = hypothesis_sentence(sample, edit, FACTS.vocabulary, list(FACTS.classes), "digit") + " Edit: color -> red"
    (verdict,) = judge.judge([JudgeItem(teacher, "0", "8", attributes=known)])
    assert verdict.score == 1.0 and verdict.grounding == 1.0
