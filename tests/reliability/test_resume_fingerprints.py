"""A resumed or cached result is reused only when what produced it is unchanged, not merely its path: a model
folder replaced at the same path, a seed changed on a labelled folder, another model's output file, a saved
estimator or joint space of other settings; and a failure is stored as a failure, never as a result."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from transformers import CLIPImageProcessor

import nemo_train.artefacts as artefacts
from nemo_train.artefacts import path_digest, record_artefact, reuse_artefact
from nemo_train.models.zero_shot import tiny_random_clip
from nemo_train.nemo.components import BenchmarkArgs, ErrorRetrievalMethod
from nemo_train.nemo.run import nemo_eval

pytestmark = pytest.mark.fault


def save_clip(folder: Path, seed: int) -> Path:
    """A random two-layer CLIP as a Hugging Face folder (model, tokenizer, image processor)."""
    shutil.rmtree(folder, ignore_errors=True)
    clip = tiny_random_clip(["x"], seed=seed)
    clip.model.save_pretrained(folder)
    clip.tokenizer.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def test_folder_digest_covers_the_defining_files_and_big_files_are_hashed_once(tmp_path, monkeypatch):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"weights-1")
    (folder / "adapter_config.json").write_text("{}")
    first = path_digest(folder)
    (folder / ".lock").write_text("123")  # not part of the model
    (folder / "llm_cache").mkdir()
    (folder / "llm_cache" / "replies.sqlite").write_bytes(b"x")
    assert path_digest(folder) == first
    (folder / "adapter_model.safetensors").write_bytes(b"weights-2")
    assert path_digest(folder) != first
    # a big file is read once per (path, inode, size, mtime); replacing it gives another key
    monkeypatch.setattr(artefacts, "CACHE_MIN_BYTES", 0)
    reads = []
    real_open = open
    monkeypatch.setattr(artefacts, "open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k), raising=False)
    big = tmp_path / "model.bin"
    big.write_bytes(b"a" * 1000)
    assert path_digest(big) == path_digest(big) and len(reads) == 1
    (tmp_path / "new.bin").write_bytes(b"b" * 1000)
    (tmp_path / "new.bin").replace(big)  # same path and size, another file
    assert path_digest(big) == hashlib.sha256(b"b" * 1000).hexdigest() and len(reads) == 2


def test_artefact_fingerprint_is_reused_only_with_equal_settings(tmp_path):
    model = tmp_path / "model.ckpt"
    assert not reuse_artefact(model, {"epochs": 1}, "model")
    model.write_bytes(b"w")
    assert not reuse_artefact(model, {"epochs": 1}, "model") and not model.exists()  # no record: recomputed
    model.write_bytes(b"w")
    record_artefact(model, {"epochs": 1})
    assert reuse_artefact(model, {"epochs": 1}, "model") and model.exists()
    assert not reuse_artefact(model, {"epochs": 2}, "model") and not model.exists()


def test_error_retrieval_rows_are_recomputed_when_the_clip_folder_is_replaced(checkpoint_factory, tmp_path):
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    clip = tmp_path / "clip" / "hf"
    bench = BenchmarkArgs(n=3, test_styles=1)
    methods = [ErrorRetrievalMethod(clip_model=str(clip), corpus="generic")]
    save_clip(clip, seed=0)
    nemo_eval(bench, [ckpt], methods, out_dir=str(tmp_path / "out"))
    save_clip(clip, seed=1)  # another CLIP behind the same path
    rerun = nemo_eval(bench, [ckpt], methods, out_dir=str(tmp_path / "out"))
    fresh = nemo_eval(bench, [ckpt], methods, out_dir=str(tmp_path / "fresh"))
    assert rerun.resumed == 0 and rerun.computed == fresh.computed
    assert rerun.recomputed_because.get("method.clip_sha256") == 3
    assert repr(rerun.cells) == repr(fresh.cells)  # repr: a cell without grounding holds NaN

    def explanations(out: str) -> dict[str, str]:
        lines = (tmp_path / out / "results.jsonl").read_text().splitlines()
        return {r["key"]: r["explanation"] for r in map(json.loads, lines)}  # the last line of a key wins

    assert explanations("out") == explanations("fresh")


def _teacher_records(out: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    return {r["sample_id"]: r for r in rows}  # the last line of a key wins, as in the store


def test_distill_teacher_with_another_seed_relabels_the_errors_it_pairs(model_a_checkpoint, tmp_path):
    from nemo_train.nemo.distill.labelling import distill_teacher

    out, fresh = tmp_path / "teacher", tmp_path / "fresh"
    args = dict(n=40, styles=1, min_cei=-100.0, views=["error"], val_fraction=0.0)
    distill_teacher(model_a_checkpoint, out_dir=str(out), seed=1, **args)
    seed_one = _teacher_records(out)
    rerun = distill_teacher(model_a_checkpoint, out_dir=str(out), seed=2, **args)
    clean = distill_teacher(model_a_checkpoint, out_dir=str(fresh), seed=2, **args)
    expected = _teacher_records(fresh)
    assert set(seed_one) & set(expected)  # the two seeds share sample ids: a key alone would keep old labels
    fields = ("label", "prediction", "p_original", "hypothesis", "cei")
    resumed = _teacher_records(out)
    assert {k: [resumed[k][f] for f in fields] for k in expected} == {
        k: [v[f] for f in fields] for k, v in expected.items()
    }
    assert (rerun["labels"], rerun["kept"], rerun["mean_cei"]) == (clean["labels"], clean["kept"], clean["mean_cei"])
    assert (out / "pairs" / "train.jsonl").read_text().count("\n") == (
        fresh / "pairs" / "train.jsonl"
    ).read_text().count("\n")


def test_distill_teacher_with_a_failing_endpoint_names_the_backend_failure(model_a_checkpoint, tmp_path, monkeypatch):
    from loopback_openai_server import LoopbackOpenAIServer, error

    import nemo_train.backends.openai_compat as openai_compat
    from nemo_train.backends import OpenAICompatibleBackend
    from nemo_train.errors import UserInputError
    from nemo_train.nemo.distill.labelling import distill_teacher

    monkeypatch.setattr(openai_compat.time, "sleep", lambda seconds: None)
    monkeypatch.setenv("FAULT_TEST_KEY", "sk-fault-test-0000")
    with LoopbackOpenAIServer(lambda request: error(500)) as server:
        backend = OpenAICompatibleBackend(server.base_url, "teacher", api_key_env="FAULT_TEST_KEY", max_retries=0)
        with pytest.raises(UserInputError, match=r"backend failed for 2 error\(s\).*HTTP 500") as caught:
            distill_teacher(
                model_a_checkpoint, out_dir=str(tmp_path / "t"), n=2, styles=1, hypotheses=backend, m=1, k=2,
                views=["error"], val_fraction=0.0,
            )  # fmt: skip
    assert "min_cei" not in str(caught.value)


def test_distill_eval_recomputes_the_student_rows_alone_when_its_adapter_is_replaced(model_a_checkpoint, tmp_path):
    import torch

    from nemo_train.explainer import ExplainerModule
    from nemo_train.models.vlm import materialize_tiny
    from nemo_train.nemo.distill.rows import KnownCause, StudentGreedy
    from nemo_train.nemo.distill.student_eval import distill_eval

    base = materialize_tiny(tmp_path / "tiny")

    def save_student(seed: int) -> str:
        torch.manual_seed(seed)
        module = ExplainerModule(model_name_or_path=str(base), lora_r=2)
        module.configure_model()
        return str(module.save_adapter(tmp_path / "student"))

    def run(out: str) -> list[dict]:
        result = distill_eval(
            student=folder, targets=[model_a_checkpoint], methods=[StudentGreedy(), KnownCause()], n=2, test_styles=1,
            error_batch=2, max_new_tokens=4, out_dir=str(tmp_path / out),
        )  # fmt: skip
        return [json.loads(line) for line in Path(result["results"]).read_text().splitlines()]

    folder = save_student(0)
    first = run("eval")
    folder = save_student(1)  # another adapter behind the same path
    again = run("eval")
    student_rows = [r for r in again if r["method"].startswith("Student")]
    assert len(again) == len(first) + len(student_rows) // 2  # the student's rows computed again, none else
    digests = {r["settings"]["student_sha256"] for r in student_rows}
    assert len(digests) == 2 and student_rows[-1]["settings"]["student_sha256"] == path_digest(folder)
    # the rows that never ask the student (KnownCause, Constant) are resumed, and carry no student settings
    assert all("student_sha256" not in r["settings"] for r in again if not r["method"].startswith("Student"))


@pytest.fixture(scope="module")
def six_cause_pairs(tmp_path_factory):
    """Small embedded six-cause pairs (the tiny explainer's cache in a temporary folder)."""
    from datamodules.explanations import build_six_cause_pairs

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NEMO_TRAIN_CACHE", str(tmp_path_factory.mktemp("nemo_cache")))
        yield build_six_cause_pairs(tmp_path_factory.mktemp("pairs"), per_cause=1, seed=0, val_fraction=0.5)


@pytest.fixture
def adapter_factory(six_cause_pairs):
    """``adapter_factory(folder, seed) -> Path``: a tiny explainer adapter with seeded random LoRA weights."""
    import torch

    from nemo_train.explainer import ExplainerModule

    def save(folder: Path, seed: int) -> Path:
        module = ExplainerModule(lora_r=2)
        module.configure_model()
        torch.manual_seed(seed)
        for name, param in module.model.named_parameters():
            if "lora_B" in name:
                param.data.normal_(0.0, 0.5)
        return module.save_adapter(folder)

    return save


def test_explain_resumes_by_key_and_settings_not_by_line_count(adapter_factory, six_cause_pairs, tmp_path):
    from nemo_train.explainer.explain_command import explain
    from nemo_train.explainer.generation import GenerationArgs

    pairs = six_cause_pairs["val"]
    n = len(pairs.read_text().splitlines())
    first, second = adapter_factory(tmp_path / "a", seed=0), adapter_factory(tmp_path / "b", seed=1)
    generation = GenerationArgs(max_new_tokens=4, temperature=1.0)
    out = tmp_path / "out" / "explanations.jsonl"
    fresh = tmp_path / "fresh" / "explanations.jsonl"
    explain(str(first), pairs=str(pairs), out_dir=str(out.parent), generation=generation, seed=3)
    # another model's output file, one line short: every line is recomputed, one line per input remains
    explain(str(second), pairs=str(pairs), out_dir=str(out.parent), generation=generation, seed=3)
    explain(str(second), pairs=str(pairs), out_dir=str(fresh.parent), generation=generation, seed=3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    expected = [json.loads(line) for line in fresh.read_text().splitlines()]
    assert len(rows) == n and rows == expected
    # an older file without keys (resumed by line count before) is recomputed, never trusted
    out.write_text("\n".join(json.dumps({"explanations": ["stale"]}) for _ in range(n)) + "\n")
    explain(str(second), pairs=str(pairs), out_dir=str(out.parent), generation=generation, seed=3)
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected


def _differences_parts(seed_a: int, seed_b: int):
    import torch

    from nemo_train.differences.generators import CMNISTGenerator
    from nemo_train.differences.methods import OptimizationArgs
    from nemo_train.differences.pipeline import ProtocolArgs, SamplingArgs
    from nemo_train.models import ClassifierModule

    sizes = dict(
        sampling=SamplingArgs(samples_per_condition=2),
        protocol=ProtocolArgs(observed_conditions=6, test_conditions=8, attribution_questions=0),
        optimization=OptimizationArgs(iterations=1, conditions_per_iteration=2, initial_conditions=3),
        heatmap_grid=False,
    )
    modules = []
    for seed in (seed_a, seed_b):
        torch.manual_seed(seed)
        modules.append(ClassifierModule(backbone="bias_cnn", num_classes=10))
    return CMNISTGenerator(), modules, sizes


def test_differences_with_a_failing_llm_evaluator_fails_instead_of_scoring_zero(tmp_path):
    from nemo_train.backends import BackendError, ScriptedBackend
    from nemo_train.differences.evaluators import LLMEvaluator
    from nemo_train.differences.models import SpecClassifier
    from nemo_train.differences.pipeline import Explainers, run_differences
    from nemo_train.errors import UserInputError

    def down(messages):
        raise BackendError("HTTP 500 after 2 retries")

    generator, (a, b), sizes = _differences_parts(0, 1)
    pair = SpecClassifier.from_module("A", a), SpecClassifier.from_module("B", b)
    evaluator = LLMEvaluator(ScriptedBackend(down, model="judge"))
    with pytest.raises(UserInputError, match=r"evaluator 'judge' failed for good on \d+ of \d+ questions.*HTTP 500"):
        run_differences(generator, *pair, tmp_path / "out", Explainers(evaluator=evaluator), quiet=True, **sizes)
    assert not (tmp_path / "out" / "results.json").exists()  # no table of 0.000 scores


def test_differences_rerun_after_a_checkpoint_is_retrained_at_the_same_path(tmp_path, lightning_checkpoint):
    from nemo_train.differences.models import SpecClassifier
    from nemo_train.differences.pipeline import run_differences
    from nemo_train.models.specs import FitCheckpoint

    generator, (a, b), sizes = _differences_parts(0, 1)
    _, (c, _), _ = _differences_parts(2, 1)
    path_a = lightning_checkpoint(a, tmp_path / "model_a" / "best.ckpt")
    path_b = lightning_checkpoint(b, tmp_path / "model_b" / "best.ckpt")

    def run(out: str):
        pair = SpecClassifier(FitCheckpoint(path_a)), SpecClassifier(FitCheckpoint(path_b))
        return run_differences(generator, *pair, tmp_path / out, quiet=True, **sizes).headline()

    run("out")
    lightning_checkpoint(c, tmp_path / "model_a" / "best.ckpt")  # Model A retrained behind the same path
    assert run("out") == run("fresh")


def test_a_saved_estimator_of_another_classifier_is_calibrated_again(checkpoint_factory, tmp_path):
    from nemo_train.artefacts import source_identity
    from nemo_train.competency.pipeline import saved_estimator_matches
    from nemo_train.errors import UserInputError

    model_a = checkpoint_factory(tmp_path / "model_a" / "best.ckpt", seed=0)
    model_b = checkpoint_factory(tmp_path / "model_b" / "best.ckpt", seed=1)
    out = tmp_path / "out"
    parce = out / "parce"
    parce.mkdir(parents=True)
    (parce / "parce.json").write_text("{}")
    (parce / "parce.safetensors").write_bytes(b"stats")
    settings_a = {"classifier": source_identity(model_a), "seed": 0}
    settings_b = {"classifier": source_identity(model_b), "seed": 0}
    assert not saved_estimator_matches(parce, out, settings_a)  # no record of what calibrated it: again
    assert not (parce / "parce.json").exists() and not (parce / "parce.safetensors").exists()
    (parce / "parce.json").write_text("{}")
    record_artefact(parce / "parce.json", settings_a)
    assert saved_estimator_matches(parce, out, settings_a)
    assert not saved_estimator_matches(parce, out, settings_b)  # Model B's checkpoint on Model A's folder
    # a folder given elsewhere (estimator.dir) is the user's: refused with the changed setting, never removed
    elsewhere = tmp_path / "saved"
    elsewhere.mkdir()
    (elsewhere / "parce.json").write_text("{}")
    record_artefact(elsewhere / "parce.json", settings_a)
    with pytest.raises(UserInputError, match="calibrated with other settings.*classifier.sha256|classifier"):
        saved_estimator_matches(elsewhere, out, settings_b)
    assert (elsewhere / "parce.json").exists()


def test_a_joint_space_trained_in_the_out_dir_with_other_settings_is_trained_again(tmp_path):
    from nemo_train.lbee.encoders import SyntheticCLIP
    from nemo_train.lbee.pipeline import clip_settings, prepare_saved_clip

    out = tmp_path / "run"
    folder = out / "clip"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    first = SyntheticCLIP(str(folder), seed=0)
    assert prepare_saved_clip(first, out) == clip_settings(first) and not folder.exists()  # unrecorded: again
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w")
    record_artefact(folder, clip_settings(first))
    assert prepare_saved_clip(SyntheticCLIP(str(folder), seed=0), out) is None and folder.exists()
    assert prepare_saved_clip(SyntheticCLIP(str(folder), seed=1, max_epochs=2), out) is not None
    assert not folder.exists()
    given = tmp_path / "exported" / "hf"  # a folder outside out_dir is an input: never removed
    given.mkdir(parents=True)
    assert prepare_saved_clip(SyntheticCLIP(str(given)), out) is None and given.exists()
