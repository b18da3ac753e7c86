"""The ``differences`` command: every config parses; a small CMNIST run prints the table and writes its files;
the open-set path (SigLIP pair over a Stable Diffusion 3 generator) runs with tiny local models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning as L
import pytest
import torch
from jsonargparse import ArgumentParser
from rule_pair import HUMAN

from nemo_train.backends import ScriptedBackend
from nemo_train.cli import main
from nemo_train.differences.evaluators import LLMEvaluator
from nemo_train.differences.explorers import LLMExplorer
from nemo_train.differences.methods import OptimizationArgs
from nemo_train.differences.models import as_compared_model
from nemo_train.differences.pipeline import Explainers, ProtocolArgs, SamplingArgs, differences, run_differences
from nemo_train.differences.summarizers import LLMSummarizer
from nemo_train.models import ClassifierModule

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs" / "differences").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_parses_and_builds(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths (caches, out_dir) land here, not in the repository
    parser = ArgumentParser()
    parser.add_function_arguments(differences)
    config = parser.parse_path(str(path))
    built = parser.instantiate_classes(config)
    model_a, model_b = (as_compared_model(t) for t in built.targets)
    assert len(built.targets) == 2 and model_a.name != model_b.name
    if path.name == "siglip_gender.yaml":
        assert len(built.protocol.test_set) == 100
        assert [built.generator.space.parse(c).label for c in built.protocol.test_set].count(1) == 50


def random_checkpoint(path: Path, seed: int) -> str:
    L.seed_everything(seed, verbose=False)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=1e-3)
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": L.__version__,
        },
        path,
    )
    return str(path)


def test_cmnist_run_prints_table_and_writes_results(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "differences", "--config", str(ROOT / "configs/differences/cmnist.yaml"), "--out_dir", str(out),
        "--wandb", "false", "--heatmap_grid", "false", "--human", HUMAN,
        "--targets", f"[{random_checkpoint(tmp_path / 'a.ckpt', 0)}, {random_checkpoint(tmp_path / 'b.ckpt', 1)}]",
        "--sampling.samples_per_condition", "2", "--protocol.test_conditions", "16",
        "--protocol.observed_conditions", "8", "--protocol.attribution_questions", "4",
        "--optimization.iterations", "1", "--optimization.conditions_per_iteration", "3",
        "--optimization.initial_conditions", "4",
    ]  # fmt: skip
    main(args)
    printed = capsys.readouterr().out
    for word in ("Completeness", "Density", "Token Length", "Human", "Raw Differences", "Summarization",
                 "Optimization", "closed-vocabulary stand-in"):  # fmt: skip
        assert word in printed
    results = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in results["rows"]] == ["human", "raw_differences", "summarization", "optimization"]
    assert results["rows"][0]["token_length"] == 74
    assert {"heatmap", "attribution", "ratio_curve"} <= set(results["files"])
    assert all(Path(results["files"][k]).is_file() for k in ("heatmap", "attribution", "ratio_curve")), results["files"]
    assert results["rows"][3]["conditions"] == 4 + 3
    for row in results["rows"]:  # intervals over the 16 test conditions beside Completeness and Density
        for metric in ("completeness", "density"):
            assert row[f"{metric}_ci_low"] <= row[metric] + 1e-12 and row[metric] <= row[f"{metric}_ci_high"] + 1e-12
    human = results["rows"][0]
    assert f"{human['completeness']:.3f} [{human['completeness_ci_low']:.3f}, " in printed
    assert (out / "diff_model_cache.json").is_file()


def test_bad_method_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["differences", "--config", str(ROOT / "configs/differences/cmnist.yaml"), "--methods", "[guessing]"])
    assert exit_info.value.code == 2
    # the message format (one line) is the command table's job; here: exit status 2 naming the bad value
    assert "guessing" in capsys.readouterr().err


def gender_llm(messages) -> str:
    text = messages[-1]["content"][0]["text"]
    if "Options: [1] Model A" in text:
        return "[1] Model A" if "woman" in text.split("Question:")[1] else "[3] Cannot be determined"
    if "From the evaluation results below" in text:
        return '{"explanation": "Model A is better than Model B on images of a woman."}'
    if "check an explanation" in text:
        return '{"feedback": "ok", "explanation": "Model A is better on women; Model B on men."}'
    if "more evidence" in text or "Conditions already tested" in text:
        return json.dumps({"conditions": [
            {"strategy": "exploration", "condition": {"text": "a woman reading in a library", "label": 1}},
            {"strategy": "exploration", "condition": {"text": "a boy riding a bike", "label": 0}},
            {"strategy": "exploitation", "condition": {"text": "a girl and a boy", "label": 1}},  # both classes
            {"strategy": "exploitation", "condition": {"text": "a man with black hair", "label": 7}},  # bad label
        ]})  # fmt: skip
    return "?"


def test_open_set_siglip_pair_over_text_to_image(tmp_path):
    from tiny_hub_models import tiny_sd3, tiny_siglip

    from nemo_train.differences.models import model_pair
    from nemo_train.differences.text_to_image import DiffusersTextToImage
    from nemo_train.models.specs import ZeroShotModel

    siglip = str(tiny_siglip(tmp_path / "siglip"))
    generator = DiffusersTextToImage(
        str(tiny_sd3(tmp_path / "sd3")), steps=1, image_size=16, device="cpu",
        drop_components=["text_encoder_3", "tokenizer_3"],
    )  # fmt: skip
    model_a, model_b = model_pair([
        ZeroShotModel(siglip, prompts=["a photo of a man with black hair", "a photo of a woman with blond hair"], name="A"),
        ZeroShotModel(siglip, prompts=["a photo of a man with blond hair", "a photo of a woman with black hair"], name="B"),
    ])  # fmt: skip
    backend = ScriptedBackend(gender_llm)
    explainers = Explainers(LLMEvaluator(backend), LLMSummarizer(backend), LLMExplorer(backend))
    test_set = [{"text": "a man cooking", "label": 0}, {"text": "a woman cooking", "label": 1},
                {"text": "a boy swimming", "label": 0}, {"text": "a girl swimming", "label": 1}]  # fmt: skip
    result = run_differences(
        generator, model_a, model_b, tmp_path / "run", explainers,
        sampling=SamplingArgs(samples_per_condition=2),
        protocol=ProtocolArgs(observed_conditions=2, test_set=test_set, attribution_questions=0),
        optimization=OptimizationArgs(iterations=1, conditions_per_iteration=2, candidates=2, initial_conditions=2),
        quiet=True,
    )  # fmt: skip
    assert [r.method for r in result.rows] == ["raw_differences", "summarization", "optimization"]
    assert result.row("raw_differences").explanation.splitlines()[0].startswith("a woman reading in a library:")
    assert result.row("summarization").explanation == "Model A is better than Model B on images of a woman."
    reasons = " ".join(r["reason"] for r in result.rejected)
    assert "already tested" in reasons and "no other class" in reasons and "out of range" in reasons
    assert "heatmap" not in result.files  # no attribute grid for captions
    assert os.path.isfile(result.files["results"])


def test_wandb_offline_log_holds_tables_and_figures(tmp_path, monkeypatch):
    from nemo_train.differences.metrics import Attribution
    from nemo_train.differences.report import DifferencesResult, MethodScore, log_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    import numpy as np

    from nemo_train.differences.diff_model import Observation
    from nemo_train.differences.generators import CMNIST_SPACE
    from nemo_train.differences.plots import heatmap

    observations = [Observation(c, 1.0 if c.values["digit"] > 4 else 0.0, 0.5) for c in CMNIST_SPACE.grid()[::13]]
    result = DifferencesResult(
        [MethodScore("optimization", 0.9, 0.5, 40, 110, "Model A is better for digits 5, 6 and 7.")],
        "keyword", "tree", "neighbourhood", 300,
        history=[{"iteration": 1, "origin": "update t=1", "kept": True, "completeness": 0.9, "density": 0.5,
                  "token_length": 40, "explanation": "Model A is better for digits 5, 6 and 7."}],
        files={"heatmap": str(heatmap(observations, CMNIST_SPACE, tmp_path / "h.png", "Diff_Model"))},
    )  # fmt: skip
    attributions = {"optimization": Attribution([" A", " B"], np.array([0.2, 0.0]), np.array([1.0, 0.0]))}
    log_wandb(result, attributions, tmp_path, "test-run")
    (run,) = tmp_path.glob("wandb/offline-run-*")
    media = run / "files" / "media"
    (results,) = media.glob("table/differences/results_*.table.json")
    assert "Model A is better for digits 5, 6 and 7." in results.read_text()
    logged = json.loads(results.read_text())  # the evaluator's label on every row
    assert logged["columns"][-1] == "scored by" and logged["data"][0][-1] == "keyword"
    (iterations,) = media.glob("table/differences/optimization_*.table.json")
    assert "update t=1" in iterations.read_text()
    assert list(media.glob("images/differences/heatmap_*.png"))
