"""Faults of language-model endpoints: trickling, truncated, non-JSON, 500/429, refused, key-echoing; a damaged cache."""

from __future__ import annotations

import logging
import socket
import sqlite3

import pytest
from faulty_servers import FaultyServer
from loopback_openai_server import LoopbackOpenAIServer, completion, error

import nemo_train.backends.openai_compat as openai_compat
from nemo_train.backends import BackendError, OpenAICompatibleBackend, user_message
from nemo_train.backends.cache import ResponseCache

pytestmark = pytest.mark.fault
SECRET = "sk-fault-test-0123456789"


@pytest.fixture(autouse=True)
def no_backoff_sleep(monkeypatch):
    monkeypatch.setattr(openai_compat.time, "sleep", lambda seconds: None)


def backend(base_url: str, **kwargs) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(base_url, model="m", api_key_env="FAULT_TEST_KEY", **kwargs)


def test_trickling_server_cannot_hold_a_request_past_its_deadline():
    """One byte every 0.5 s would take about a minute; the 1 s deadline covers the whole body."""
    with FaultyServer("trickle", interval=0.5) as server:
        client = backend(server.base_url, timeout=1.0, max_retries=1)
        with pytest.raises(BackendError, match="timed out after 1.0s after 1 retries"):
            client.chat([user_message("hi")])
    assert client.stats.retries == 1


@pytest.mark.parametrize("kind", ["truncated", "cut_json", "not_json"])
def test_truncated_and_non_json_bodies_are_retried(kind):
    with FaultyServer(kind, fail_first=2, reply="recovered") as server:
        client = backend(server.base_url, max_retries=3)
        assert client.chat([user_message("hi")]) == ["recovered"]
    assert server.requests == 3 and client.stats.retries == 2


@pytest.mark.parametrize("kind", ["truncated", "cut_json", "not_json"])
def test_truncated_and_non_json_bodies_end_in_a_backend_error(kind):
    with FaultyServer(kind) as server:
        client = backend(server.base_url, max_retries=2)
        with pytest.raises(BackendError, match="after 2 retries"):
            client.chat([user_message("hi")])
    assert server.requests == 3


@pytest.mark.parametrize("status", [500, 503, 429])
def test_5xx_and_429_are_retried_then_a_backend_error(status):
    with LoopbackOpenAIServer([error(status, retry_after="0")] * 3) as server:
        client = backend(server.base_url, max_retries=2)
        with pytest.raises(BackendError, match=f"HTTP {status} after 2 retries"):
            client.chat([user_message("hi")])
    assert len(server.requests) == 3


def test_refused_connection_is_retried_then_a_backend_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = backend(f"http://127.0.0.1:{port}/v1", max_retries=2, timeout=2.0)
    with pytest.raises(BackendError, match="connection error"):
        client.chat([user_message("hi")])
    assert client.stats.retries == 2


def test_a_key_echoing_server_never_gets_the_key_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULT_TEST_KEY", SECRET)
    with LoopbackOpenAIServer(
        lambda request: completion(f"your key is {SECRET}, header {request['headers']}")
    ) as server:
        client = backend(server.base_url, cache=tmp_path / "cache")
        reply = client.chat([user_message("hi")])[0]
        assert SECRET not in reply and "<redacted>" in reply
        assert client.chat([user_message("hi")])[0] == reply and client.stats.cache_hits == 1
    client.cache.close()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes()


def test_a_damaged_cache_is_moved_aside_with_one_warning(tmp_path, caplog):
    path = tmp_path / "llm_replies.sqlite"
    cache = ResponseCache(path)
    cache.put("k", ["reply"])
    cache.close()
    data = bytearray(path.read_bytes())
    data[:16] = b"this is not sql!"  # the SQLite header
    path.write_bytes(bytes(data))
    with pytest.raises(sqlite3.DatabaseError):  # what every earlier version did on open
        sqlite3.connect(path).execute("SELECT * FROM replies").fetchall()
    with caplog.at_level(logging.WARNING, logger="nemo_train.backends.cache"):
        fresh = ResponseCache(path)
    assert len(fresh) == 0 and fresh.get("k") is None
    fresh.put("k", ["again"])
    assert fresh.get("k") == ["again"]
    moved = list(tmp_path.glob("llm_replies.sqlite.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes()[:16] == b"this is not sql!"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
