"""Distillation over a zoo: the teacher pools pairs over the training zoo (evidence view in every prompt), the
Class prior row on a held-out member takes the training zoo's prior, and the pooled report's intervals."""

from __future__ import annotations

import json

import pytest

from datamodules.explanations import read_records
from nemo_train.errors import UserInputError
from nemo_train.models.zoo_run import zoo
from nemo_train.nemo.distill import trivial_rows
from nemo_train.nemo.distill.evidence_rule import EvidenceRule
from nemo_train.nemo.distill.labelling import distill_teacher
from nemo_train.nemo.distill.rows import DistillContext, KnownCause
from nemo_train.nemo.distill.student_eval import distill_eval, edit_scorers
from nemo_train.nemo.distill.trivial_rows import ClassPrior, OddOneOut
from nemo_train.nemo.distill.zoo_members import zoo_members
from nemo_train.nemo.methods import trivial
from nemo_train.scoring.shift_benchmark import build_shift_benchmark

pytestmark = pytest.mark.slow  # the tiny zoo takes about 30 s to train

#: the members' data and the mining data: small, but with references of every digit
DATA = {"train_size": 400, "test_shift": "multi"}


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """Two training members and one held-out member, one epoch on 400 images each (built here, not shipped)."""
    out = tmp_path_factory.mktemp("zoo") / "zoo"
    zoo(out_dir=str(out), seed=3, train_members=2, heldout_members=1, prefix="tiny", max_epochs=1, device="cpu",
        train_size=400, test_size=100, batch_size=32)  # fmt: skip
    return out


def test_zoo_members_are_fit_checkpoints_with_their_recorded_gaps(tiny_zoo):
    manifest = {m["name"]: m for m in json.loads((tiny_zoo / "zoo.json").read_text())["members"]}
    train, heldout = zoo_members(tiny_zoo, "train"), zoo_members(tiny_zoo / "zoo.json", "heldout")
    assert [m.name for m in train] == ["tiny_train_00", "tiny_train_01"]
    assert [m.name for m in heldout] == ["tiny_heldout_00"]
    for member in train + heldout:
        assert member.gaps == manifest[member.name]["gaps"]
        assert member.spec.path == str(tiny_zoo / member.split / member.name / "checkpoints" / "best.ckpt")
    with pytest.raises(UserInputError, match="no zoo"):
        zoo_members(tiny_zoo / "missing", "train")


def test_the_teacher_pools_evidence_pairs_over_the_training_zoo(tiny_zoo, tmp_path):
    out = tmp_path / "teacher"
    result = distill_teacher(zoo=str(tiny_zoo), dataset="shifts", n=6, seed=1, min_cei=-100.0, val_fraction=0.0,
                             data_kwargs=DATA, out_dir=str(out), device="cpu")  # fmt: skip
    labels = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    by_member = {
        name: [r for r in labels if r["key"].startswith(f"{name}|")] for name in ("tiny_train_00", "tiny_train_01")
    }
    assert all(by_member.values()), "both training members' errors are labelled"
    assert not any(r["key"].startswith("tiny_heldout") for r in labels)
    pairs = read_records(result["train"])
    assert len(pairs) == result["kept"] == len(labels)  # min_cei -100 keeps every label, one view
    assert {p.provenance["classifier"] for p in pairs} == set(by_member)
    for pair in pairs:  # every prompt carries the classifier's evidence: the references and how it read them
        assert pair.provenance["view"] == "evidence"
        assert pair.counterfactual is not None and "classifier" in pair.prompt
        assert len(pair.provenance["readings"]) == len(pair.provenance["references"]) >= 2
    with pytest.raises(UserInputError, match="evidence in every prompt"):
        distill_teacher(zoo=str(tiny_zoo), dataset="shifts", views=["error"], out_dir=str(tmp_path / "refused"))


def test_class_prior_on_a_held_out_member_is_the_training_zoos_prior(tiny_zoo, monkeypatch):
    train, (heldout,) = zoo_members(tiny_zoo, "train"), zoo_members(tiny_zoo, "heldout")
    target = heldout.spec.build()
    bench = build_shift_benchmark(target, heldout.gaps, n=8, seed=0, size=200, datamodule_kwargs=DATA)
    mined_with = []

    def spy(target, gaps, **kwargs):
        mined_with.append(gaps)
        return build_shift_benchmark(target, gaps, **kwargs)

    monkeypatch.setattr(trivial_rows, "build_shift_benchmark", spy)
    structured, keyword = edit_scorers(bench, target, None, 0)
    ctx = DistillContext(bench, target, None, structured, keyword, seed=0, training_zoo=train)
    method, _ = ClassPrior(data_kwargs=DATA, mining_size=300).build(ctx)
    assert mined_with == [m.gaps for m in train]  # the held-out member's own errors are never mined
    pooled = []  # the training members' mining errors, pooled, computed here on their own
    for member in train:
        mined = build_shift_benchmark(member.spec.build(), member.gaps, n=300, seed=0, split="mining", size=300,
                                      datamodule_kwargs=DATA)  # fmt: skip
        pooled += [(s.prediction, s.cause) for s in mined.errors]
    prior, overall = trivial.class_prior(pooled)
    assert method.prior == prior and method.fallback == overall


def test_class_prior_mines_as_the_run_draws_when_given_no_split_of_its_own(tiny_zoo, monkeypatch):
    train, (heldout,) = zoo_members(tiny_zoo, "train"), zoo_members(tiny_zoo, "heldout")
    target = heldout.spec.build()
    bench = build_shift_benchmark(target, heldout.gaps, n=4, seed=0, size=200, datamodule_kwargs=DATA)
    drawn_with = []

    def spy(target, gaps, **kwargs):
        drawn_with.append(kwargs["datamodule_kwargs"])
        return build_shift_benchmark(target, gaps, **kwargs)

    monkeypatch.setattr(trivial_rows, "build_shift_benchmark", spy)
    structured, keyword = edit_scorers(bench, target, None, 0)
    run = {"test_shift": "multi3", "train_size": 400}
    ctx = DistillContext(bench, target, None, structured, keyword, seed=0, training_zoo=train, data_kwargs=run)
    ClassPrior(mining_size=100).build(ctx)
    assert drawn_with == [run, run]
    ClassPrior(data_kwargs=DATA, mining_size=100).build(ctx)  # its own split wins
    assert drawn_with[2:] == [DATA, DATA]


def test_distill_eval_without_a_student_runs_the_rows_that_need_none(tiny_zoo, tmp_path):
    rows = [KnownCause(), EvidenceRule(), OddOneOut()]
    out = tmp_path / "bars"
    result = distill_eval(student=None, zoo=str(tiny_zoo), dataset="shifts", methods=rows, n=4, seed=0,
                          data_kwargs={"test_shift": "multi3", "train_size": 400}, out_dir=str(out),
                          device="cpu")  # fmt: skip
    methods = {key.split("|")[0] for key in result["summary"]}
    assert {"Evidence rule (not a model)", "Odd-one-out"} <= methods
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert records and all("student" not in r["settings"] for r in records)
    assert all(r["settings"]["data_kwargs.test_shift"] == "multi3" for r in records)
