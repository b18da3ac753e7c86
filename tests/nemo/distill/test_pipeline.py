"""distill-teacher writes resumable, CEI-filtered pairs in the explanation-record format; presets parse."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402
from jsonargparse import ArgumentParser  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms.functional import to_tensor  # noqa: E402

from datamodules.explanations import read_records  # noqa: E402
from datamodules.shifts import GapSpec  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.metrics.bootstrap import mean_interval  # noqa: E402
from nemo_train.models.specs import TimmModel  # noqa: E402
from nemo_train.nemo.distill import trivial_rows  # noqa: E402
from nemo_train.nemo.distill.edit_rows import StudentEdits  # noqa: E402
from nemo_train.nemo.distill.labelling import PoolClassifier, build_target, distill_teacher  # noqa: E402
from nemo_train.nemo.distill.rows import (  # noqa: E402
    DistillMethod,
    ExhaustiveTeacher,
    KnownCause,
    StudentChangeMLLM,
    StudentGreedy,
    StudentSciTX,
    default_distill_methods,
    student_distill_methods,
)
from nemo_train.nemo.distill.student_eval import distill_eval  # noqa: E402
from nemo_train.scoring.structured import StructuredEditDeriver  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
PRESETS = sorted((ROOT / "configs" / "distill").glob("*.yaml"))


@pytest.fixture(scope="module")
def checkpoint(model_a_checkpoint):
    return model_a_checkpoint


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_distill_presets_parse(path):
    function = distill_eval if path.stem.endswith("_eval") else distill_teacher
    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(function)
    parser.add_argument("--config", action="config")
    config = parser.parse_args(["--config", str(path)])
    assert config.dataset in ("cmnist", "clevr", "shifts", "folder")
    if function is distill_eval and "pool" in path.stem:  # the pool student is scored in its comparison view
        rows = parser.instantiate_classes(config).methods
        assert [type(r) for r in rows] == [ExhaustiveTeacher, StudentChangeMLLM, KnownCause]
        assert rows[1].reference_class == "prototype"
    elif function is distill_eval and "bars" in path.stem:  # the held-out zoo's bars: no student at all
        rows = parser.instantiate_classes(config).methods
        assert config.student is None and not any(r.uses_student for r in rows)
        assert config.zoo_split == "heldout" and config.data_kwargs == {"test_shift": "multi3"}
        assert config.error_sampling == "by_cause"
        assert [type(r).__name__ for r in rows] == [
            "ExhaustiveTeacher",
            "KnownCause",
            "SciTXTemplate",
            "EvidenceRule",
            "EvidenceRule",
            "OddOneOut",
            "ClassPrior",
            "ClassFreeConstant",
            "Everything",
            "Distractor",
        ]
        # the single-trait view of before, then the zoo student's view (zoo_teacher.yaml's evidence)
        assert [r.evidence.label for r in rows[3:5]] == ["", "paired x3 ranked"]
    elif function is distill_eval and "zoo" in path.stem:  # the held-out zoo: the budget rows beside the teacher
        rows = parser.instantiate_classes(config).methods
        assert config.zoo_split == "heldout" and not config.targets
        budget = (0, 1, 2, 0, 1, 2) if "budget" in path.stem else (0, 1, 2, 4)
        assert [(r.edits, r.view) for r in rows if isinstance(r, StudentEdits)] == [(e, "evidence") for e in budget]
        # each budget row has its trivial row: the evidence's order with the same tests and no student
        rules = {(r.edits, r.accept) for r in rows if type(r).__name__ == "EvidenceRule" and r.edits}
        assert {(r.edits, r.accept) for r in rows if isinstance(r, StudentEdits) and r.edits} == rules
        # the budget benchmark: more unusual traits than tests, so tests do not settle the cause by elimination
        assert config.data_kwargs["test_shift"] == ("multi4" if "budget" in path.stem else "multi3")
        wanted = {
            ExhaustiveTeacher,
            KnownCause,
            trivial_rows.ClassPrior,
            trivial_rows.OddOneOut,
            trivial_rows.Everything,
            trivial_rows.Distractor,
        }
        assert wanted <= {type(r) for r in rows}
        teacher = yaml.safe_load((path.parent / "zoo_teacher.yaml").read_text())["evidence"]
        asked = [r for r in rows if isinstance(r, StudentEdits) or type(r).__name__ == "EvidenceRule"]
        assert asked and all(asdict(r.evidence) == teacher for r in asked)  # the student asked as it was taught
    elif function is distill_eval and "evidence" in path.stem:  # the evidence student is asked its own view
        rows = parser.instantiate_classes(config).methods
        assert [type(r) for r in rows] == [ExhaustiveTeacher, StudentGreedy, StudentSciTX, KnownCause]
        assert [r.view for r in rows[1:3]] == ["evidence", "evidence"]
    elif function is distill_eval:  # rows are objects: every one of them, the SciTX one with its options
        rows = parser.instantiate_classes(config).methods
        expected = student_distill_methods() if config.dataset == "folder" else default_distill_methods()
        if path.stem == "shifts_eval":  # the trivial rows beside KnownCause
            expected += [trivial_rows.Everything(), trivial_rows.ClassFreeConstant()]
            expected += [trivial_rows.ClassPrior(), trivial_rows.OddOneOut()]
        assert [type(r) for r in rows] == [type(r) for r in expected]  # folder data: no teacher / KnownCause row
        assert all(isinstance(r, DistillMethod) for r in rows)
        assert [(r.k, r.m) for r in rows if isinstance(r, StudentSciTX)] == [(8, 4)]
    if function is distill_teacher and "zoo" in path.stem:  # pooled over the training zoo, evidence in every prompt
        assert config.zoo and config.zoo_split == "train" and config.views == ["evidence"] and not config.classifier
    elif function is distill_teacher and "evidence" in path.stem:  # a pool of shifts gap assignments, none gaps_b
        assert config.views == ["evidence"] and config.pool and all(isinstance(p.bias, dict) for p in config.pool)
        unseen = GapSpec.parse("gaps_b")
        assert all(GapSpec.parse(p.bias) != unseen for p in config.pool) and GapSpec.parse(config.bias) != unseen
    elif function is distill_teacher and config.get("pool"):  # each pool classifier with its colour bias
        halves = {(min(p.bias), c) for p in config.pool for c in sum(p.bias.values(), [])}
        assert len(halves) == len(config.pool) and all(
            sorted(p.bias) in ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9]) for p in config.pool
        )
        assert (5, "blue") not in halves  # Model B's bias stays out of the pool: it is the unseen one
    if config.get("hypotheses") is not None:  # an MLLM teacher: a backend class_path with its init_args
        assert config.hypotheses.class_path.endswith("OpenAICompatibleBackend")


def test_teacher_writes_filtered_pairs_and_resumes(checkpoint, tmp_path, capsys):
    out = tmp_path / "teacher"
    first = distill_teacher(checkpoint, out_dir=str(out), n=6, styles=1, min_cei=20.0, val_fraction=0.34)
    labels = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    assert len(labels) == first["labels"] == 6
    # one classifier: the interval of the mean CEI is the item bootstrap over its labelled errors
    assert (first["mean_cei_ci_low"], first["mean_cei_ci_high"]) == mean_interval([r["cei"] for r in labels])
    kept = [r for r in labels if r["kept"]]
    assert len(kept) == first["kept"] and all(r["cei"] >= 20.0 for r in kept)
    train, val = read_records(first["train"]), read_records(first["val"])
    records = train + val
    assert len(records) == 3 * len(kept)  # three views per kept error
    assert {r.provenance["view"] for r in records} == {"error", "gradcam", "change"}
    assert not {r.provenance["sample_id"] for r in train} & {r.provenance["sample_id"] for r in val}
    deriver = StructuredEditDeriver({"color": ["red"] * 10, "angle": list(range(-30, 31, 5))})
    for record in records:
        assert Path(record.image).is_file() and record.cei >= 20.0
        assert deriver.derive_one(record.explanation) is not None  # the edit is readable from the answer
        assert (record.counterfactual is not None) == (record.provenance["view"] == "change")
    capsys.readouterr()
    again = distill_teacher(checkpoint, out_dir=str(out), n=6, styles=1, min_cei=20.0, val_fraction=0.34)
    assert "0 errors labelled" in capsys.readouterr().out
    assert again["kept"] == first["kept"]


def test_teacher_labels_a_pool_of_classifiers_into_one_pair_file(checkpoint, tmp_path, capsys):
    import shutil

    from nemo_train.nemo.distill.mining import mine_synthetic_errors
    from nemo_train.nemo.methods.change_mllm import prototype_reference

    other = tmp_path / "blue_model" / "checkpoints" / "best.ckpt"
    other.parent.mkdir(parents=True)
    shutil.copy(checkpoint, other)  # the same weights under another name and another declared bias
    blue = {d: ["blue"] for d in range(5)}
    out = tmp_path / "pool"
    kwargs = dict(n=4, styles=1, min_cei=-100.0, views=["change"], reference_class="prototype", val_fraction=0.25)
    result = distill_teacher(
        checkpoint, bias="model_a", pool=[PoolClassifier(str(other), blue)], out_dir=str(out), **kwargs
    )
    labels = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    name = Path(checkpoint).parent.name  # a checkpoint outside a fit folder is named by its folder
    assert result["labels"] == len(labels) == 8 and len({r["key"] for r in labels}) == 8
    assert result["mean_cei_ci_low"] <= result["mean_cei"] <= result["mean_cei_ci_high"]  # over the two classifiers
    records = read_records(result["train"]) + read_records(result["val"])
    assert len(records) == 8 and {r.provenance["classifier"] for r in records} == {name, "blue_model"}
    # the pool member's errors are its bias-conflicting ones: digits 0-4 in a colour other than blue
    pool_errors = mine_synthetic_errors("cmnist", build_target(str(other)), 4, 1, 1, blue).errors
    assert all(s.attrs["digit"] < 5 and s.attrs["color"] != 2 for s in pool_errors)
    assert {r.provenance["sample_id"] for r in records if r.provenance["classifier"] == "blue_model"} == {
        s.sample_id for s in pool_errors
    }
    # the comparison image is the true class's prototype: the correct reference with the largest P(y)
    target = build_target(checkpoint)
    bench = mine_synthetic_errors("cmnist", target, 4, 1, 1, "model_a")
    for record in records:
        if record.provenance["classifier"] == name:
            index = prototype_reference(target, bench, record.label)
            saved = to_tensor(Image.open(record.counterfactual).convert("RGB"))
            assert torch.allclose(saved, bench.reference.image(index), atol=1 / 255)
    with pytest.raises(UserInputError, match="distinct names"):
        distill_teacher(checkpoint, pool=[PoolClassifier(checkpoint, blue)], out_dir=str(tmp_path / "x"), **kwargs)
    capsys.readouterr()


def test_teacher_refuses_bad_input(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        distill_teacher("missing.ckpt", out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="mining_root and evaluation_root"):
        distill_teacher(TimmModel("resnet18"), dataset="folder", out_dir=str(tmp_path))


def test_distill_eval_scores_teacher_and_known_cause_and_resumes(checkpoint, tmp_path, capsys):
    student = tmp_path / "student"
    student.mkdir()  # rows without the student never load it
    kwargs = dict(
        student=str(student), targets=[checkpoint], methods=[ExhaustiveTeacher(), KnownCause()], n=4, test_styles=1
    )
    result = distill_eval(**kwargs, out_dir=str(tmp_path / "eval"))
    rows = [json.loads(line) for line in Path(result["results"]).read_text().splitlines()]
    assert len(rows) == 12  # the teacher, KnownCause and the Constant row (the teacher's most frequent answer)
    constant = [r for r in rows if r["method"] == "Constant"]
    teacher_answers = [r["explanation"] for r in rows if r["method"].startswith("Teacher")]
    assert {r["explanation"] for r in constant} == {max(teacher_answers, key=teacher_answers.count)}
    assert result["constant"] == constant[0]["explanation"]
    for method in ("Teacher (exhaustive search, not a model)", "KnownCause"):
        mine = [r for r in rows if r["method"] == method]
        cell = result["summary"][f"{method}|{Path(checkpoint).parent.name}"]
        assert cell["cei"] == pytest.approx(sum(r["cei"] for r in mine) / 4)
        assert cell["cei_ci_low"] <= cell["cei"] <= cell["cei_ci_high"]  # the interval over the 4 errors
        assert (cell["cei_ci_low"], cell["cei_ci_high"]) == mean_interval(
            [r["cei"] for r in sorted(mine, key=lambda r: r["sample_id"])]
        )
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["summary"] == result["summary"]
    teacher = [r["cei"] for r in rows if r["method"].startswith("Teacher")]
    known = [r["cei"] for r in rows if r["method"] == "KnownCause"]
    assert all(t >= k - 1e-6 for t, k in zip(teacher, known))  # the exhaustive search is the max-CEI edit
    capsys.readouterr()
    again = distill_eval(**kwargs, out_dir=str(tmp_path / "eval"))
    assert again["summary"] == result["summary"]
    with pytest.raises(UserInputError, match="student adapter folder"):
        distill_eval(student=str(tmp_path / "none"), targets=[checkpoint])


def test_distill_eval_rows_reject_unknown_names_and_options(tmp_path):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(distill_eval)
    base = ["--student=s", "--targets=[t.ckpt]"]
    parsed = parser.parse_args([*base, "--methods=[StudentGreedy, {class_path: StudentSciTX, init_args: {m: 2}}]"])
    assert [r["class_path"].rsplit(".", 1)[1] for r in parsed.methods] == ["StudentGreedy", "StudentSciTX"]
    from jsonargparse import ArgumentError

    with pytest.raises(ArgumentError, match="q"):
        parser.parse_args([*base, "--methods=[{class_path: StudentSciTX, init_args: {q: 3}}]"])
    with pytest.raises(ArgumentError, match="teacher"):
        parser.parse_args([*base, "--methods=[teacher]"])


def test_distill_eval_student_rows_run_batched_on_a_saved_explainer(checkpoint, tmp_path):
    from nemo_train.explainer import ExplainerModule
    from nemo_train.models.vlm import materialize_tiny
    from nemo_train.nemo.distill.rows import StudentChangeMLLM, StudentGreedy

    module = ExplainerModule(model_name_or_path=str(materialize_tiny(tmp_path / "tiny")), lora_r=2)
    module.configure_model()
    folder = module.save_adapter(tmp_path / "student")
    rows = [StudentGreedy(), StudentChangeMLLM(reference_class="true")]
    result = distill_eval(
        student=str(folder),
        targets=[checkpoint],
        methods=rows,
        n=3,
        test_styles=1,
        error_batch=2,
        max_new_tokens=6,
        out_dir=str(tmp_path / "eval"),
    )
    records = [json.loads(line) for line in Path(result["results"]).read_text().splitlines()]
    assert sorted({r["method"] for r in records}) == ["ChangeMLLM (student)", "Student (greedy)"]
    assert len(records) == 6 and not any(r["failed"] for r in records)
    # an untrained explainer writes no readable structured answer: nothing to test, CEI 0
    assert all(r["cei"] == 0.0 for r in records)
    settings = records[-1]["settings"]
    assert settings["method.class"] == "StudentChangeMLLM" and settings["method.reference_class"] == "true"
    assert settings["student.max_new_tokens"] == 6
