"""The SciTX teacher labels errors in batches: the same labels as one at a time, in fewer request rounds.

An OpenAI-compatible server on 127.0.0.1 answers the teacher's requests (hypotheses and attribute edits;
CMNIST's references come with captions) on CMNIST Model A's mined errors; its hypotheses depend on the error's true
class, so the labels differ between errors and a mixed-up batch would show.
"""

from __future__ import annotations

import json
import re

import pytest
from loopback_openai_server import LoopbackOpenAIServer, completion, error

from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.backends.messages import to_data_url
from nemo_train.nemo.distill.labelling import build_target, distill_teacher
from nemo_train.nemo.distill.mining import mine_synthetic_errors

SECRET = "sk-test-teacher-batches-0123456789"
COLOURS = ("red", "green", "blue", "yellow")
N, M = 6, 2


def _text(request: dict) -> str:
    parts = []
    for message in request["body"]["messages"]:
        content = message["content"]
        parts += [content] if isinstance(content, str) else [p.get("text", "") for p in content]
    return "\n".join(p for p in parts if isinstance(p, str))


def _classes(text: str) -> tuple[int, int]:
    found = re.search(r'class "(\d)", but the classifier predicted "(\d)"', text)
    return int(found[1]), int(found[2])


def _images(request: dict) -> list[str]:
    """The image data URLs of a request, in order."""
    return [
        part["image_url"]["url"]
        for message in request["body"]["messages"]
        if not isinstance(message["content"], str)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def scripted(request: dict, fail: str | None = None):
    """Captions, hypotheses naming a colour picked from the true class, and the edit a hypothesis names; the
    hypotheses request that attaches the image ``fail`` (a data URL) is refused."""
    text, n = _text(request), int(request["body"].get("n") or 1)
    if "Suspected reason for the mistake" in text:
        colour = re.search(r"should be (\w+)", text)[1]
        return completion(json.dumps({"attribute": "color", "value": colour}))
    if "cause_of_error" in text:
        if fail is not None and fail in _images(request):
            return error(400)  # not retried by the backend: the batch fails at once
        true = _classes(text)[0]
        answers = [f"The digit should be {COLOURS[(true + i) % len(COLOURS)]}." for i in range(n)]
        return completion(*[json.dumps({"cause_of_error": a}) for a in answers])
    return completion(*["A handwritten digit."] * n)


class CountingBackend(OpenAICompatibleBackend):
    """The endpoint backend, counting its request rounds (``chat_batch`` calls)."""

    rounds = 0

    def chat_batch(self, conversations, **sampling):
        self.rounds += 1
        return super().chat_batch(conversations, **sampling)


@pytest.fixture(autouse=True, scope="module")
def _fake_key():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", SECRET)
        yield


@pytest.fixture(scope="module")
def checkpoint(model_a_checkpoint):
    return model_a_checkpoint


def _run(checkpoint, server, out, error_batch: int) -> tuple[dict, CountingBackend, int]:
    backend = CountingBackend(server.base_url, "teacher", api_key_env="OPENAI_API_KEY", max_retries=0)
    before = len(server.requests)
    result = distill_teacher(
        checkpoint,
        out_dir=str(out),
        n=N,
        styles=1,
        hypotheses=backend,
        m=M,
        k=4,
        min_cei=-100.0,
        views=["error"],
        val_fraction=0.0,
        error_batch=error_batch,
    )
    return result, backend, len(server.requests) - before


def _labels(out) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
    return {r["sample_id"]: {k: v for k, v in r.items() if k != "settings"} for r in rows}


def test_batched_teacher_gives_the_same_labels_in_fewer_rounds(checkpoint, tmp_path, capsys):
    with LoopbackOpenAIServer(scripted) as server:
        _, alone, requests_alone = _run(checkpoint, server, tmp_path / "alone", error_batch=1)
        result, batched, requests_batched = _run(checkpoint, server, tmp_path / "batched", error_batch=4)
        one_at_a_time, in_batches = _labels(tmp_path / "alone"), _labels(tmp_path / "batched")
        assert len(in_batches) == result["labels"] == N
        assert in_batches == one_at_a_time  # same hypotheses, edits, CEI and probabilities for every error
        assert len({json.dumps(r["edit"]) for r in in_batches.values()}) > 1  # the labels differ between errors
        # hypotheses, edits: two rounds per batch instead of two per error; the endpoint gets the same
        # requests, those of a batch `concurrency` at a time
        assert (alone.rounds, batched.rounds) == (2 * N, 2 * 2)
        assert requests_batched == requests_alone > 0
        # a rerun skips every labelled error without a request, whatever its batch size
        _, again, requests_again = _run(checkpoint, server, tmp_path / "batched", error_batch=3)
        assert requests_again == 0 and again.rounds == 0
        assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    assert "0 errors labelled" in capsys.readouterr().out
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any("llm_cache" in str(p) for p in written)
    assert [str(p) for p in written if SECRET.encode() in p.read_bytes()] == []


def test_a_failing_error_is_retried_alone_and_labelled_by_the_next_run(checkpoint, tmp_path, capsys):
    # the error to refuse is named by its own image, so the case exists whichever errors the classifier makes
    errors = mine_synthetic_errors("cmnist", build_target(checkpoint), N, 1, 1, None).errors
    images = [to_data_url(s.image) for s in errors]
    fail = images[0]
    assert images.count(fail) == 1
    out = tmp_path / "teacher"
    with LoopbackOpenAIServer(lambda request: scripted(request, fail)) as server:
        first, _, _ = _run(checkpoint, server, out, error_batch=N)
    assert "1 error(s) left unlabelled" in capsys.readouterr().out
    assert first["labels"] == N - 1 and len(_labels(out)) == N - 1  # the others of its batch were kept
    with LoopbackOpenAIServer(scripted) as server:
        second, backend, requests = _run(checkpoint, server, out, error_batch=N)
    labels = _labels(out)
    assert second["labels"] == N and len(labels) == N
    # only the missing error is asked about: its hypotheses and their edits
    assert requests == 1 + M and backend.rounds == 2
    with LoopbackOpenAIServer(scripted) as server:
        _run(checkpoint, server, tmp_path / "fresh", error_batch=N)
    assert _labels(tmp_path / "fresh") == labels  # the same labels as a run that never failed


def test_derive_many_asks_once_for_all_errors_and_matches_one_at_a_time():
    """The instruction deriver of folder data: one request round for every error, each distinct request once."""
    from nemo_toys import solid

    from nemo_train.backends.scripted import ScriptedBackend
    from nemo_train.scoring.batched_scoring import derive_many
    from nemo_train.scoring.benchmark import ErrorSample
    from nemo_train.scoring.interventions import LLMInstructionDeriver

    def instruction(messages):
        text = messages[-1]["content"] if isinstance(messages[-1]["content"], str) else str(messages[-1]["content"])
        hypothesis = re.search(r"(Too \w+)", text)[1]
        return json.dumps({"reasoning": "-", "solution": f"Undo: {hypothesis.lower()}"})

    samples = [ErrorSample(f"s{i}", solid(i % 3), i % 2, 1 - i % 2) for i in range(4)]
    hypotheses = [["Too dark", "Too small"], ["Too dark"], [], ["Too dark", "Too bright"]]
    names = ["cat", "dog"]
    alone = ScriptedBackend(instruction)
    expected = [LLMInstructionDeriver(alone).derive(s, h, names) if h else [] for s, h in zip(samples, hypotheses)]

    batched = ScriptedBackend(instruction)
    found = derive_many(LLMInstructionDeriver(batched), samples, hypotheses, names)
    assert found == expected and found[0] == ["Undo: too dark", "Undo: too small"] and found[2] == []
    # errors 1 and 3 share classes (a dog called a cat) and "Too dark": that request is asked once
    assert batched.batches == [4] and len(batched.calls) == 4 and len(alone.calls) == 5
