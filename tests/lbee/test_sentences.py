"""Sentence sets: user file, LLM-generated through a backend (cached), class names with a user file."""

from __future__ import annotations

import json

import pytest

from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError
from nemo_train.lbee.sentences import ClassNameSentences, FileSentences, LLMSentences


def test_file_sentences_skip_blank_lines_comments_and_duplicates(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("# weather\nA photo taken at night\n\nA blurry photo\nA photo taken at night\n")
    assert FileSentences(str(path)).build().texts == ["A photo taken at night", "A blurry photo"]
    with pytest.raises(UserInputError):
        FileSentences(str(tmp_path / "missing.txt")).build()


def test_llm_sentences_one_request_per_topic_malformed_dropped_and_asked_again(tmp_path):
    replies = {
        "weather": json.dumps({"sentences": ["A photo taken in fog", "A photo taken in fog", 3]}),
        "quality": "Sure! Here you go: not json",
    }

    def responder(messages):
        if len(messages) > 1:  # a re-ask after a malformed reply
            return "still not json"
        text = messages[0]["content"][-1]["text"]
        return next(v for k, v in replies.items() if k in text)

    backend = ScriptedBackend(responder, model="writer", cache=tmp_path / "cache")
    built = LLMSentences(backend, "animals outdoors", ["weather", "quality"], per_topic=2).build()
    assert built.texts == ["A photo taken in fog"] and built.conditions is None
    calls = len(backend.calls)
    rerun = ScriptedBackend(responder, model="writer", cache=tmp_path / "cache")
    again = LLMSentences(rerun, "animals outdoors", ["weather", "quality"], per_topic=2).build()
    assert again.texts == built.texts
    # the good reply comes from the cache; the reply that stayed malformed was not kept, so it is asked again
    assert "quality" in rerun.calls[0]["messages"][0]["content"][-1]["text"]
    assert len(rerun.calls) == 3  # quality and its two re-asks; weather from the cache
    assert calls == 4  # weather, quality, and two re-asks of the malformed quality reply
    assert backend.stats.json_failures == 1


def test_class_name_sentences_with_user_file(tmp_path):
    path = tmp_path / "extra.txt"
    path.write_text("A blurry photo\n")
    built = ClassNameSentences("An image of a {}", str(path)).build(["cat", "dog"])
    assert built.texts == ["An image of a cat", "An image of a dog", "A blurry photo"]
    assert built.known() == [True, True, False]
    with pytest.raises(UserInputError):
        ClassNameSentences("no placeholder")
