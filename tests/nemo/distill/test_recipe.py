"""The real-model distillation recipe, run end to end on tiny local models of the real architectures.

The three shipped presets run through the command line with only path and size overrides:

1. ``distill-teacher --config configs/distill/imagenet_teacher.yaml``: a random timm ``test_resnet`` ImageNet
   classifier (loaded from a local safetensors file through ``TimmModel``), an ImageNet-style mining folder
   disjoint from the evaluation folder, SciTX hypotheses / instructions / captions from a scripted
   OpenAI-compatible server on 127.0.0.1, edits by a random InstructPix2Pix pipeline loaded from its folder;
2. ``fit --config configs/explainer/distill_qwen2_5_vl.yaml`` on those pairs with a tiny random Qwen2.5-VL
   (full precision on CPU instead of 4-bit on GPU, two steps);
3. ``distill-eval --config configs/distill/imagenet_eval.yaml`` with that student as the MLLM of every row and
   the judge behind the same server.

A fake ``OPENAI_API_KEY`` is set; it must reach the server and appear in no file the runs write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from loopback_openai_server import LoopbackOpenAIServer
from tiny_recipe import (
    HYPOTHESIS,
    INSTRUCTION,
    TIMM_ARCH,
    save_tiny_instruct_pix2pix,
    save_tiny_timm,
    scripted_reply,
    write_image_folder,
)

from datamodules.explanations import read_records
from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.cli import run_lightning_cli, run_pipeline
from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule
from nemo_train.models.specs import TimmModel
from nemo_train.models.targets import ClassMapping
from nemo_train.nemo.distill.rows import KnownCause, StudentGreedy
from nemo_train.nemo.distill.student_eval import distill_eval, edit_scorers
from nemo_train.scoring.editors import DiffusersEdit
from nemo_train.scoring.folder_benchmark import build_folder_benchmark
from nemo_train.scoring.judges import LLMJudge
from nemo_train.scoring.structured import split_answer
from tests.explainer.tiny_real import build

ROOT = Path(__file__).resolve().parents[3]
SECRET = "sk-test-recipe-0123456789abcdef"
STUDENT_ROWS = ("Student (greedy)", "SciTX (student, M=4)", "CamMLLM (student)", "ChangeMLLM (student)")
#: tiny diffusers edits: 32 px, two denoising steps
EDITOR_SIZE = ["--editor.init_args.size=32", "--editor.init_args.call_kwargs={num_inference_steps: 2}"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread_and_a_fake_key():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # several OpenMP threads on a shared 2-core machine are much slower
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", SECRET)
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def local_models(tmp_path_factory):
    """Folders and weights: mining and evaluation folders, timm weights, editor and student base model."""
    root = tmp_path_factory.mktemp("recipe")
    return {
        "root": root,
        "mining": write_image_folder(root / "mining", per_class=3, seed=1, stem="mine"),
        "evaluation": write_image_folder(root / "evaluation", per_class=3, seed=2, stem="eval"),
        "timm": save_tiny_timm(root / "test_resnet.safetensors"),
        "editor": save_tiny_instruct_pix2pix(root / "instruct_pix2pix"),
        "qwen": build("qwen2_5_vl", root / "qwen2_5_vl"),
    }


@pytest.fixture(scope="module")
def server():
    with LoopbackOpenAIServer(scripted_reply) as running:
        yield running


def teacher_args(local_models, server) -> list[str]:
    return [
        "--config",
        str(ROOT / "configs/distill/imagenet_teacher.yaml"),
        f"--classifier.init_args.model_name={TIMM_ARCH}",
        f"--classifier.init_args.weights_file={local_models['timm']}",
        f"--mining_root={local_models['mining']}",
        f"--evaluation_root={local_models['evaluation']}",
        f"--hypotheses.init_args.base_url={server.base_url}",
        f"--editor.init_args.model={local_models['editor']}",
        *EDITOR_SIZE,
        f"--out_dir={local_models['root'] / 'teacher'}",
        "--n=3",
        "--m=2",
        "--k=4",
        "--min_cei=-100",  # a random classifier: keep every label
        "--val_fraction=0.34",
    ]


@pytest.fixture(scope="module")
def teacher(local_models, server):
    result = run_pipeline("distill-teacher", teacher_args(local_models, server))
    return local_models["root"] / "teacher", result, len(server.requests)


@pytest.fixture(scope="module")
def student(local_models, teacher):
    out, result, _ = teacher
    root = local_models["root"] / "student"
    qwen = local_models["qwen"]
    run_lightning_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs/explainer/distill_qwen2_5_vl.yaml"),
            "--trainer.accelerator=cpu",
            "--trainer.precision=32",
            "--trainer.max_steps=2",
            "--trainer.accumulate_grad_batches=1",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={root}",
            f"--model.init_args.model_name_or_path={qwen}",
            "--model.init_args.load_in_4bit=false",
            f"--data.init_args.model_name_or_path={qwen}",
            f"--data.init_args.train_jsonl={result['train']}",
            f"--data.init_args.val_jsonl={result['val']}",
            "--data.init_args.num_workers=0",
            "--data.init_args.max_length=512",
            "--data.init_args.batch_size=2",
        ]
    )
    return root


@pytest.fixture(scope="module")
def evaluation(local_models, student, server):
    before = len(server.requests)
    out = local_models["root"] / "eval"
    result = run_pipeline(
        "distill-eval",
        [
            "--config",
            str(ROOT / "configs/distill/imagenet_eval.yaml"),
            f"--student={student / 'adapter'}",
            f"--targets.init_args.model_name={TIMM_ARCH}",
            f"--targets.init_args.weights_file={local_models['timm']}",
            f"--evaluation_root={local_models['evaluation']}",
            f"--judges.init_args.backend.init_args.base_url={server.base_url}",
            f"--editor.init_args.model={local_models['editor']}",
            *EDITOR_SIZE,
            f"--out_dir={out}",
            "--n=2",
            "--max_new_tokens=8",  # a two-step student rambles; its answers are cut short
        ],
    )
    return out, result, server.requests[before:]


def test_teacher_writes_structured_pairs_with_cei_and_provenance(teacher, server):
    out, result, requests = teacher
    assert result["labels"] == result["kept"] == 3
    records = read_records(result["train"]) + read_records(result["val"])
    assert len(records) == 9  # three views of each error
    assert {r.provenance["view"] for r in records} == {"error", "gradcam", "change"}
    for record in records:
        cause, edit = split_answer(record.explanation)
        assert cause.startswith(HYPOTHESIS) and edit == INSTRUCTION  # hypothesis + the edit it implies
        assert isinstance(record.cei, float) and record.provenance["teacher"].startswith("SciTX(m=2")
        assert Path(record.image).is_file() and record.label != record.prediction
        assert (record.counterfactual is not None) == (record.provenance["view"] == "change")
    labels = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    assert {r["settings"]["target"]["timm"] for r in labels} == {TIMM_ARCH}  # the local weights, by content hash
    assert all(len(r["settings"]["target"]["sha256"]) == 64 for r in labels)
    # hypotheses, instructions and reference captions all came from the OpenAI-compatible server, with the key
    assert requests > 0 and all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in server.requests)


def test_teacher_rerun_resumes_without_asking_again(teacher, local_models, server, capsys):
    out, first, _ = teacher
    before = len(server.requests)
    capsys.readouterr()
    again = run_pipeline("distill-teacher", teacher_args(local_models, server))
    assert "0 errors labelled" in capsys.readouterr().out
    assert len(server.requests) == before and again["kept"] == first["kept"]


def test_mined_errors_come_from_the_mining_folder_only(teacher):
    records = read_records(teacher[1]["train"]) + read_records(teacher[1]["val"])
    mined = {r.provenance["sample_id"] for r in records}
    assert len(mined) == 3 and all(s.split("-")[-1].startswith("mine") for s in mined)


def test_student_fit_writes_a_loadable_safetensors_adapter(student):
    adapter = student / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    meta = json.loads((adapter / "nemo_explainer.json").read_text())
    assert meta["load_in_4bit"] is False
    reloaded = ExplainerModule.from_adapter(adapter)
    lora_b = [v for k, v in reloaded.state_dict().items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # LoRA B starts at zero: two steps moved it


def test_eval_rows_come_from_the_student_and_are_judged_by_the_endpoint(evaluation):
    out, result, requests = evaluation
    rows = [json.loads(line) for line in Path(result["results"]).read_text().splitlines()]
    assert {r["method"] for r in rows} == set(STUDENT_ROWS)
    assert len(rows) == 4 * 2 and {r["target"] for r in rows} == {TIMM_ARCH}
    for method in STUDENT_ROWS:
        assert f"{method}|{TIMM_ARCH}" in result["summary"]
    # the student answered every question (its replies are cached under out_dir); the server saw no
    # hypothesis, caption or instruction request during the evaluation: only judge prompts, if any
    assert (out / "llm_cache").is_dir() and any((out / "llm_cache").iterdir())
    for request in requests:
        assert '"score"' in json.dumps(request["body"]["messages"])
    for row in rows:
        if not row["explanation"]:  # an empty answer names no cause: 0, without asking the judge
            assert row["llm_match"] == 0.0


def test_eval_scores_a_structured_answer_with_the_diffusers_editor(local_models, teacher):
    """The evaluation's scorer on folder data applies the instruction a structured answer states."""
    mapping = ClassMapping.for_folder(local_models["evaluation"])
    target = TimmModel(TIMM_ARCH, weights_file=str(local_models["timm"])).build(mapping.class_names, mapping)
    bench = build_folder_benchmark(
        "folder", local_models["evaluation"], target, "imagenet_r", n=1, class_folders=mapping.folders
    )
    editor = DiffusersEdit(str(local_models["editor"]), size=32, call_kwargs={"num_inference_steps": 2})
    structured, keyword = edit_scorers(bench, target, editor, seed=0)
    answer = read_records(teacher[1]["train"])[0].explanation
    (trial,) = structured.score(bench.errors[0], [answer], bench.class_names)
    assert keyword is None and trial.instruction == INSTRUCTION
    p = target.predict_proba(bench.errors[0].image[None])[0, bench.errors[0].label]
    assert trial.p_original == pytest.approx(float(p), abs=1e-5)
    assert trial.cei == pytest.approx(100 * (trial.p_edited - trial.p_original), abs=1e-4)
    with pytest.raises(UserInputError, match="DiffusersEdit"):
        edit_scorers(bench, target, None, seed=0)


def test_no_run_writes_the_api_key(local_models, evaluation, student, teacher):
    written = [p for p in local_models["root"].rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in written) and any("cache" in str(p) for p in written)
    leaked = [str(p) for p in written if SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_folder_eval_refuses_incomplete_settings(local_models, student, server, tmp_path):
    judge = LLMJudge(OpenAICompatibleBackend(server.base_url, "judge", api_key_env="OPENAI_API_KEY"))
    kwargs = dict(
        student=str(student / "adapter"),
        targets=[TimmModel(TIMM_ARCH, weights_file=str(local_models["timm"]))],
        dataset="folder",
        out_dir=str(tmp_path / "eval"),
    )
    with pytest.raises(UserInputError, match="evaluation_root"):
        distill_eval(**kwargs)
    kwargs["evaluation_root"] = str(local_models["evaluation"])
    with pytest.raises(UserInputError, match="judges"):
        distill_eval(**kwargs)
    kwargs.update(judges=[judge], criterion="imagenet_r")
    with pytest.raises(UserInputError, match="editor"):
        distill_eval(**kwargs)
    kwargs["editor"] = DiffusersEdit(str(local_models["editor"]))
    with pytest.raises(UserInputError, match="need generated data"):
        distill_eval(**kwargs, methods=[StudentGreedy(), KnownCause()])
    with pytest.raises(UserInputError, match="does not exist"):
        distill_eval(**{**kwargs, "targets": [TimmModel(TIMM_ARCH, weights_file=str(tmp_path / "none"))]})
    assert not (tmp_path / "eval").exists()  # refused before anything is written
