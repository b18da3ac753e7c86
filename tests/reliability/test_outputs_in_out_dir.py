"""Every output of a run lives under its out_dir: the default joint space, reply caches, Diff_Model values.

Each command runs from an empty working folder with a relative ``--out_dir`` and ``HOME`` pointing at an empty
folder; afterwards the working folder holds only the out_dir and ``HOME`` holds nothing (the system temp folder
is the one other place a run may write)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from faulty_servers import FaultyServer

from nemo_train.cli import main
from nemo_train.models import ClassifierModule
from tests.models.tiny_clip import TINY_CLIP

pytestmark = pytest.mark.fault


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """An empty working folder and an empty home; yields the working folder."""
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    yield cwd
    assert files_under(home) == set()
    assert {p.name for p in cwd.iterdir()} <= {"run"}, files_under(cwd)


def test_lbee_writes_its_joint_space_and_reply_cache_under_out_dir(elsewhere, tmp_path):
    torch.manual_seed(0)
    module = ClassifierModule(backbone="bias_cnn", num_classes=6)
    classifier = tmp_path / "inputs" / "classifier.ckpt"
    classifier.parent.mkdir()
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, classifier)
    sentences = tmp_path / "inputs" / "sentences.txt"
    sentences.write_text("A photo of a bird.\nA photo in snow.\n")
    with FaultyServer("error", fail_first=0, reply="yes") as vqa:
        config = {
            "data": {
                "class_path": "datamodules.nico.NICODataModule",
                "init_args": {"correlation": 0.85, "image_size": 16, "train_size": 240, "test_per_pair": 1},
            },
            "encoder": {  # no path: the default <out_dir>/clip
                "class_path": "nemo_train.lbee.encoders.SyntheticCLIP",
                "init_args": {"train_per_source": 64, "max_epochs": 1, "batch_size": 32, "model": TINY_CLIP},
            },
            "sentences": {
                "class_path": "nemo_train.lbee.sentences.FileSentences",
                "init_args": {"path": str(sentences)},
            },
            "relevance": {
                "class_path": "nemo_train.lbee.relevance.VQARelevance",
                "init_args": {
                    "backends": [
                        {
                            "class_path": "nemo_train.backends.OpenAICompatibleBackend",
                            "init_args": {"base_url": vqa.base_url, "model": "vlm", "api_key_env": None},
                        }
                    ]
                },
            },
            "search": {"clustering": {"n_clusters": 2}},
            "evaluation": {"sweep": [0.2], "partition_k": 0},
            "classifier": str(classifier),
        }
        (tmp_path / "lbee.yaml").write_text(yaml.safe_dump(config))
        main(["lbee", "--config", str(tmp_path / "lbee.yaml"), "--out_dir", "run"])
        asked = vqa.requests
        main(["lbee", "--config", str(tmp_path / "lbee.yaml"), "--out_dir", "run"])
    assert asked == 72 and vqa.requests == asked  # the rerun answered every question from the cache
    run = elsewhere / "run"
    assert (run / "clip" / "config.json").is_file() and (run / "llm_cache" / "llm_replies.sqlite").is_file()
    assert (run / "results.json").is_file()


def test_differences_writes_its_reply_cache_and_values_under_out_dir(elsewhere):
    from nemo_train.backends import ScriptedBackend
    from nemo_train.differences.evaluators import LLMEvaluator
    from nemo_train.differences.generators import CMNISTGenerator
    from nemo_train.differences.methods import OptimizationArgs
    from nemo_train.differences.models import SpecClassifier
    from nemo_train.differences.pipeline import Explainers, ProtocolArgs, SamplingArgs, run_differences

    modules = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        modules.append(ClassifierModule(backbone="bias_cnn", num_classes=10))
    pair = SpecClassifier.from_module("A", modules[0]), SpecClassifier.from_module("B", modules[1])
    evaluator = LLMEvaluator(ScriptedBackend(lambda messages: "[1] Model A", model="judge"))
    run_differences(
        CMNISTGenerator(), *pair, Path("run"), Explainers(evaluator=evaluator), ["raw_differences"],
        SamplingArgs(samples_per_condition=2), ProtocolArgs(observed_conditions=6, test_conditions=8,
        attribution_questions=0), OptimizationArgs(iterations=0), heatmap_grid=False, quiet=True,
    )  # fmt: skip
    run = elsewhere / "run"
    assert (run / "llm_cache" / "llm_replies.sqlite").is_file() and (run / "diff_model_cache.json").is_file()
    assert evaluator.backend.cache.path.resolve().is_relative_to(run.resolve())
