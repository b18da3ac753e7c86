"""Relevance Gamma: ground-truth attribute conditions, and VQA pseudo ground truth against the loopback
OpenAI-compatible server (yes / no / malformed replies, AND of two backends, cache on rerun)."""

from __future__ import annotations

import pytest
import torch
from loopback_openai_server import LoopbackOpenAIServer, completion

from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.errors import UserInputError
from nemo_train.lbee.relevance import AttributeRelevance, VQARelevance, parse_yes_no, question_for
from nemo_train.lbee.sentences import AttributeSentences, SentenceSet

IMAGES = torch.stack([torch.full((3, 8, 8), v) for v in (0.0, 0.5, 1.0)])  # three distinct images


def _backend(server, model, cache):
    return OpenAICompatibleBackend(
        server.base_url,
        model=model,
        api_key_env=None,
        timeout=5.0,
        max_retries=1,
        backoff=0.01,
        concurrency=1,
        cache=cache,
    )


def _scripted(answers: dict[tuple[int, str], str]):
    """Reply by (image brightness id, sentence): the image is recognised by its data URL."""
    seen: dict[str, int] = {}

    def responder(request):
        content = request["body"]["messages"][0]["content"]
        url = next(p["image_url"]["url"] for p in content if p["type"] == "image_url")
        text = next(p["text"] for p in content if p["type"] == "text")
        image = seen.setdefault(url, len(seen))
        sentence = next(s for (i, s) in answers if i == image and f'"{s}"' in text)
        return completion(answers[(image, sentence)])

    return responder


def test_parse_yes_no():
    assert parse_yes_no("Yes.") is True
    assert parse_yes_no("  no, it is not") is False
    assert parse_yes_no("**YES**") is True
    assert parse_yes_no("I cannot tell") is None
    assert parse_yes_no("yesterday") is None
    assert question_for("A photo of a bird in water.") == (
        "Does this image match the description \"A photo of a bird in water\"? Reply simply with 'yes' or 'no'."
    )


def test_vqa_and_of_two_backends_malformed_counts_as_no_and_cache_on_rerun(tmp_path):
    sentences = SentenceSet(["a dark image", "a bright image"])
    first = {
        (0, "a dark image"): "Yes",
        (0, "a bright image"): "no",
        (1, "a dark image"): "yes",
        (1, "a bright image"): "Yes.",
        (2, "a dark image"): "No",
        (2, "a bright image"): "yes",
    }
    second = {
        (0, "a dark image"): "yes",
        (0, "a bright image"): "yes",
        (1, "a dark image"): "no",
        (1, "a bright image"): "maybe?",
        (2, "a dark image"): "no",
        (2, "a bright image"): "YES",
    }
    with LoopbackOpenAIServer(_scripted(first)) as a, LoopbackOpenAIServer(_scripted(second)) as b:
        vqa = VQARelevance([_backend(a, "vlm-a", tmp_path / "cache"), _backend(b, "vlm-b", tmp_path / "cache")])
        gamma = vqa(sentences, IMAGES, {})
        # AND: image 0 dark (yes & yes), image 1 nothing (dark: yes & no; bright: yes & malformed), image 2 bright
        assert gamma.tolist() == [[True, False], [False, False], [False, True]]
        assert vqa.malformed == 1
        assert len(a.requests) == len(b.requests) == 6
        rerun = VQARelevance([_backend(a, "vlm-a", tmp_path / "cache"), _backend(b, "vlm-b", tmp_path / "cache")])
        assert torch.equal(rerun(sentences, IMAGES, {}), gamma)
        assert len(a.requests) == len(b.requests) == 6  # every answer came from the cache
        assert rerun.backends[0].stats.cache_hits == 6


def test_vqa_uses_attribute_conditions_where_known(tmp_path):
    sentences = SentenceSet(["a photo of a bird", "a blurry photo"], [{"object": 1}, None])
    attrs = {"object": torch.tensor([1, 0, 1])}
    with LoopbackOpenAIServer(lambda request: completion("yes")) as server:
        gamma = VQARelevance([_backend(server, "vlm", None)])(sentences, IMAGES, attrs)
        assert len(server.requests) == 3  # only the sentence without conditions is asked, once per image
    assert gamma.tolist() == [[True, True], [False, True], [True, True]]


def test_attribute_relevance_of_nico_sentences():
    sentence_set = AttributeSentences("nico").build()
    assert len(sentence_set) == 6 + 6 + 36
    attrs = {"object": torch.tensor([1, 5]), "context": torch.tensor([5, 0])}  # bird in water, car in dim light
    gamma = AttributeRelevance()(sentence_set, IMAGES[:2], attrs)
    described = [[sentence_set.texts[n] for n in torch.nonzero(row).flatten()] for row in gamma]
    assert described[0] == ["a photo of a bird", "a photo taken in water", "a photo of a bird in water"]
    assert described[1] == ["a photo of a car", "a photo taken in dim light", "a photo of a car in dim light"]
    with pytest.raises(UserInputError):
        SentenceSet(["free text"]).relevance(attrs)
