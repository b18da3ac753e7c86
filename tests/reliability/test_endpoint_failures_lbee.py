"""A failing endpoint does not lose an ``lbee`` run: sentence generator 500, VQA 500, VQA hang. Every question that
can be answered is answered and cached under out_dir, the failures are one line, and a rerun asks only them."""

from __future__ import annotations

import json

import pytest
from faulty_servers import FaultyServer

import nemo_train.backends.openai_compat as openai_compat
from datamodules.nico import NICODataModule
from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.errors import UserInputError
from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.encoders import SyntheticCLIP
from nemo_train.lbee.pipeline import EvalArgs, lbee
from nemo_train.lbee.relevance import VQARelevance
from nemo_train.lbee.search import FailureModeSearch
from nemo_train.lbee.sentences import FileSentences, LLMSentences
from tests.models.tiny_clip import TINY_CLIP

pytestmark = pytest.mark.fault
SENTENCES = json.dumps({"sentences": ["A photo of a bird.", "A photo in snow."]})


@pytest.fixture(autouse=True)
def no_backoff_sleep(monkeypatch):
    monkeypatch.setattr(openai_compat.time, "sleep", lambda seconds: None)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A random 6-class classifier, a tiny trained joint space (an input folder) and a sentence file."""
    import torch

    from nemo_train.models import ClassifierModule

    folder = tmp_path_factory.mktemp("inputs")
    torch.manual_seed(0)
    module = ClassifierModule(backbone="bias_cnn", num_classes=6)
    classifier = folder / "classifier.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, classifier)
    clip = SyntheticCLIP(str(folder / "clip"), train_per_source=64, max_epochs=1, batch_size=32, model=TINY_CLIP)
    clip.encoder()
    (folder / "sentences.txt").write_text("A photo of a bird.\nA photo in snow.\n")
    return folder


def backend(server: FaultyServer, model: str = "vlm", **kwargs) -> OpenAICompatibleBackend:
    options = {"api_key_env": None, "max_retries": 0, "timeout": 5.0, "concurrency": 1, **kwargs}
    return OpenAICompatibleBackend(server.base_url, model=model, **options)


def run(inputs, out, sentences, vqa_servers, models=("vlm", "vlm-b"), **backend_options):
    return lbee(
        data=NICODataModule(correlation=0.85, image_size=16, train_size=240, test_per_pair=1, batch_size=32),
        encoder=SyntheticCLIP(str(inputs / "clip")),
        sentences=sentences,
        relevance=VQARelevance([backend(s, m, **backend_options) for s, m in zip(vqa_servers, models)]),
        search=FailureModeSearch(clustering=WardClustering(n_clusters=2)),
        classifier=str(inputs / "classifier.ckpt"),
        evaluation=EvalArgs(sweep=[0.2], partition_k=0),
        out_dir=str(out),
    )


def test_sentence_generator_500_is_one_line_and_a_rerun_asks_only_the_failed_topic(inputs, tmp_path):
    out = tmp_path / "run"
    with (
        FaultyServer("error", fail_first=1, reply=SENTENCES) as llm,
        FaultyServer("error", fail_first=0, reply="yes") as vqa,
    ):
        generator = LLMSentences(backend(llm), "NICO-like photos", topics=["objects", "places"])
        with pytest.raises(UserInputError) as failed:
            run(inputs, out, generator, [vqa])
        message = str(failed.value)
        assert "sentence generator 'vlm' failed for good on 1 of 2 topics" in message and "HTTP 500" in message
        assert "\n" not in message and str(out / "llm_cache") in message
        assert not (out / "results.json").exists() and llm.requests == 2
        generator = LLMSentences(backend(llm), "NICO-like photos", topics=["objects", "places"])
        result = run(inputs, out, generator, [vqa])
    assert llm.requests == 3  # only the failed topic was asked again
    assert result.sentences == ["A photo of a bird.", "A photo in snow."] and (out / "results.json").is_file()


def test_vqa_500_keeps_every_other_answer_and_a_rerun_asks_only_the_failed_ones(inputs, tmp_path):
    out = tmp_path / "run"
    sentences = FileSentences(str(inputs / "sentences.txt"))
    with FaultyServer("error", fail_first=5, reply="yes") as vqa:
        with pytest.raises(UserInputError, match=r"VQA backend 'vlm' failed for good on 5 question\(s\) \(.*HTTP 500"):
            run(inputs, out, sentences, [vqa])
        asked = vqa.requests
        assert asked == 72 and not (out / "results.json").exists()  # 36 images x 2 sentences, all asked
        result = run(inputs, out, sentences, [vqa])
    assert vqa.requests == asked + 5  # the 67 answers received came from the cache in out_dir
    assert (out / "results.json").is_file() and result.s_star is not None


def test_a_hanging_vqa_endpoint_is_given_up_after_one_batch_then_rerun(inputs, tmp_path):
    out = tmp_path / "run"
    sentences = FileSentences(str(inputs / "sentences.txt"))
    with FaultyServer("hang") as hang, FaultyServer("error", fail_first=0, reply="no") as good:
        with pytest.raises(UserInputError) as failed:
            run(inputs, out, sentences, [good, hang], timeout=1.0, concurrency=4)
        message = str(failed.value)
        assert "'vlm-b' failed for good on 16 question(s) and was not asked 56 more" in message
        assert "timed out after 1.0s" in message and "\n" not in message
        assert hang.requests == 16 and good.requests == 72  # the working backend answered everything
        run(inputs, out, sentences, [good, good])
    assert good.requests == 72 + 72  # 'vlm' answered from the cache; 'vlm-b' got no answer before: all asked
    assert (out / "results.json").is_file()
