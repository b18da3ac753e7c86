"""OpenAICompatibleBackend against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import threading
import time

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
import torch
from loopback_openai_server import LoopbackOpenAIServer, Reply, completion, error

from nemo_train.backends import BackendError, OpenAICompatibleBackend, user_message
from nemo_train.backends.messages import from_data_url, to_pil

SECRET = "sk-test-7f3a9c1e5b2d4f6a8c0e"
KEY_ENV = "NEMO_TEST_API_KEY"


def make_backend(server: LoopbackOpenAIServer, **kwargs) -> OpenAICompatibleBackend:
    settings = dict(
        model="test-model",
        api_key_env=KEY_ENV,
        timeout=5.0,
        max_retries=3,
        backoff=0.01,
        max_backoff=0.05,
        concurrency=2,
    )
    settings.update(kwargs)
    return OpenAICompatibleBackend(server.base_url, **settings)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


def test_request_body_headers_and_image_encoding():
    image = torch.rand(3, 8, 8)
    with LoopbackOpenAIServer([completion("first", "second")]) as server:
        backend = make_backend(server)
        replies = backend.chat([user_message("describe", [image])], n=2, temperature=0.7, max_tokens=33, seed=5)
    assert replies == ["first", "second"]
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {SECRET}"
    assert request["headers"]["content-type"] == "application/json"
    body = request["body"]
    assert {k: body[k] for k in ("model", "n", "temperature", "max_tokens", "seed")} == {
        "model": "test-model",
        "n": 2,
        "temperature": 0.7,
        "max_tokens": 33,
        "seed": 5,
    }
    (message,) = body["messages"]
    assert message["role"] == "user"
    image_part, text_part = message["content"]
    assert text_part == {"type": "text", "text": "describe"}
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    # the PNG data URL carries exactly the pixels we sent (8-bit)
    assert list(from_data_url(image_part["image_url"]["url"]).getdata()) == list(to_pil(image).getdata())


def test_no_authorization_header_without_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with LoopbackOpenAIServer([completion("ok")]) as server:
        assert make_backend(server).chat([user_message("hi")]) == ["ok"]
    assert "authorization" not in server.requests[0]["headers"]


def test_retries_on_429_and_500_then_succeeds():
    script = [error(429, retry_after="0"), error(500), error(503), completion("finally")]
    with LoopbackOpenAIServer(script) as server:
        backend = make_backend(server)
        assert backend.chat([user_message("hi")]) == ["finally"]
    assert len(server.requests) == 4
    assert backend.stats.retries == 3


def test_gives_up_after_max_retries():
    with LoopbackOpenAIServer([error(500)] * 5) as server:
        backend = make_backend(server, max_retries=2)
        with pytest.raises(BackendError, match="HTTP 500 after 2 retries"):
            backend.chat([user_message("hi")])
    assert len(server.requests) == 3


def test_client_error_is_not_retried_and_names_the_env_var():
    with LoopbackOpenAIServer([error(401), completion("never")]) as server:
        backend = make_backend(server)
        with pytest.raises(BackendError, match=f"HTTP 401.*{KEY_ENV}") as info:
            backend.chat([user_message("hi")])
    assert len(server.requests) == 1
    assert SECRET not in str(info.value)


def test_timeout_is_retried_then_reported():
    with LoopbackOpenAIServer([Reply(delay=1.0, body={}), completion("in time")]) as server:
        backend = make_backend(server, timeout=0.2)
        assert backend.chat([user_message("hi")]) == ["in time"]
    assert backend.stats.retries == 1
    with LoopbackOpenAIServer([Reply(delay=1.0, body={})] * 2) as server:
        backend = make_backend(server, timeout=0.2, max_retries=1)
        with pytest.raises(BackendError, match="timed out after 0.2s after 1 retries"):
            backend.chat([user_message("hi")])


def test_malformed_json_is_reasked_then_recorded_as_failure():
    with LoopbackOpenAIServer(
        [completion("no json here"), completion("still {not json"), completion("nope")]
    ) as server:
        backend = make_backend(server)
        assert backend.chat_json([user_message("give json")], max_reasks=2) == [None]
    assert len(server.requests) == 3
    assert backend.stats.json_reasks == 2 and backend.stats.json_failures == 1
    # each re-ask shows the model its bad reply and asks again for the bare object
    last = server.requests[-1]["body"]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert last[1]["content"] == "no json here" and last[3]["content"] == "still {not json"
    assert "JSON" in last[-1]["content"][0]["text"]


def test_reask_recovers_and_a_failure_does_not_stop_a_batch():
    def respond(request):
        text = request["body"]["messages"][0]["content"][0]["text"]
        return completion('{"score": 1}') if text == "good" else completion("I cannot answer in JSON.")

    with LoopbackOpenAIServer(respond) as server:
        backend = make_backend(server, concurrency=2)
        results = backend.chat_json_batch([[user_message("bad")], [user_message("good")]], max_reasks=1)
    assert results == [[None], [{"score": 1}]]
    with LoopbackOpenAIServer([completion("oops"), completion('```json\n{"a": 1}\n```')]) as server:
        assert make_backend(server).chat_json([user_message("x")]) == [{"a": 1}]


def test_concurrency_limit_bounds_requests_in_flight():
    in_flight, peak, lock = [0], [0], threading.Lock()

    def respond(request):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.15)
        with lock:
            in_flight[0] -= 1
        return completion(request["body"]["messages"][0]["content"][0]["text"].upper())

    with LoopbackOpenAIServer(respond) as server:
        backend = make_backend(server, concurrency=2)
        replies = backend.chat_batch([[user_message(w)] for w in "abcdef"])
        # more caller threads than slots: the semaphore still bounds what reaches the server
        threads = [threading.Thread(target=backend.chat, args=([user_message(f"t{i}")],)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert replies == [[w.upper()] for w in "abcdef"]
    assert peak[0] == 2


def test_separate_requests_when_endpoint_lacks_n():
    with LoopbackOpenAIServer([completion("a"), completion("b"), completion("c")]) as server:
        backend = make_backend(server, native_n=False)
        assert backend.chat([user_message("x")], n=3, temperature=1.0, seed=10) == ["a", "b", "c"]
    assert [r["body"]["seed"] for r in server.requests] == [10, 11, 12]
    assert all("n" not in r["body"] for r in server.requests)


def test_cache_answers_repeats_and_never_stores_the_key(tmp_path):
    cache_file = tmp_path / "replies.sqlite"
    with LoopbackOpenAIServer([completion("one"), completion("two")]) as server:
        backend = make_backend(server, cache=cache_file)
        image = torch.zeros(3, 4, 4)
        assert backend.chat([user_message("q", [image])]) == ["one"]
        assert backend.chat([user_message("q", [image.clone()])]) == ["one"]  # same pixels: a cache hit
        assert backend.chat([user_message("q", [image])], max_tokens=7) == ["two"]  # other params: a new request
        again = make_backend(server, cache=cache_file)  # a new process would read the same file
        assert again.chat([user_message("q", [image])]) == ["one"]
    assert len(server.requests) == 2
    assert backend.stats.cache_hits == 1 and again.stats.cache_hits == 1
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in raw


def test_api_key_never_logged_or_shown(caplog, monkeypatch):
    monkeypatch.setenv("PLAIN_NAMED_VAR", SECRET)  # a variable whose name does not look secret
    caplog.set_level(logging.DEBUG)
    echo = Reply(400, {"error": {"message": f"bad request from key {SECRET}"}})
    with LoopbackOpenAIServer([error(429), error(500), completion("x"), echo]) as server:
        backend = make_backend(server, api_key_env="PLAIN_NAMED_VAR")
        backend.chat([user_message("hi")])
        with pytest.raises(BackendError, match="redacted") as info:
            backend.chat([user_message("other")])
    assert "retry 1/3" in caplog.text  # retries are logged ...
    assert SECRET not in caplog.text  # ... without the key
    assert SECRET not in repr(backend) and SECRET not in str(info.value)
    assert SECRET not in str(vars(backend))


def test_bad_settings_raise_user_input_error():
    from nemo_train.errors import UserInputError

    with pytest.raises(UserInputError, match="base_url"):
        OpenAICompatibleBackend("localhost:8000", model="m")
    with pytest.raises(UserInputError, match="concurrency"):
        OpenAICompatibleBackend("http://127.0.0.1:1/v1", model="m", concurrency=0)


def test_backoff_doubles_and_obeys_retry_after(monkeypatch):
    import nemo_train.backends.openai_compat as openai_compat

    slept = []
    monkeypatch.setattr(openai_compat.time, "sleep", slept.append)
    script = [error(500), error(502), error(429, retry_after="3"), error(503), completion("done")]
    with LoopbackOpenAIServer(script) as server:
        backend = make_backend(server, backoff=0.5, max_backoff=5.0, max_retries=4)
        assert backend.chat([user_message("hi")]) == ["done"]
    # 0.5, 1, (2 raised to Retry-After 3), 4 -- each with at most 10 % jitter
    for got, expected in zip(slept, [0.5, 1.0, 3.0, 4.0]):
        assert expected <= got <= expected * 1.1
    assert len(slept) == 4


def test_connection_errors_are_retried_then_reported(monkeypatch):
    import socket

    import nemo_train.backends.openai_compat as openai_compat

    monkeypatch.setattr(openai_compat.time, "sleep", lambda seconds: None)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = OpenAICompatibleBackend(f"http://127.0.0.1:{port}/v1", model="m", max_retries=2, timeout=2.0)
    with pytest.raises(BackendError, match="connection error .* after 2 retries"):
        backend.chat([user_message("hi")])
    assert backend.stats.retries == 2


def test_field_names_for_reasoning_models():
    with LoopbackOpenAIServer([completion("ok")]) as server:
        backend = make_backend(
            server,
            max_tokens_field="max_completion_tokens",
            drop_params=["temperature"],
            extra_body={"reasoning_effort": "low"},
        )
        backend.chat([user_message("hi")], max_tokens=64, seed=3)
    body = server.requests[0]["body"]
    assert body["max_completion_tokens"] == 64 and body["reasoning_effort"] == "low" and body["seed"] == 3
    assert "max_tokens" not in body and "temperature" not in body
    from nemo_train.errors import UserInputError

    with pytest.raises(UserInputError, match="drop_params"):
        OpenAICompatibleBackend("http://127.0.0.1:1/v1", model="m", drop_params=["model"])
