"""Replies bounded in size: a server streaming an endless body cannot push memory up."""

from __future__ import annotations

import threading

import psutil
import pytest
from faulty_servers import FaultyServer
from loopback_openai_server import LoopbackOpenAIServer, completion

from nemo_train.backends import BackendError, OpenAICompatibleBackend, user_message
from nemo_train.errors import UserInputError

pytestmark = pytest.mark.fault
MiB = 2**20


class PeakRSS:
    """The largest resident set size of this process seen while the block runs (sampled every 5 ms)."""

    def __enter__(self) -> PeakRSS:
        self._process, self._done = psutil.Process(), threading.Event()
        self.start = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.start


def test_an_endless_body_is_abandoned_at_the_size_cap_and_memory_stays_flat():
    with FaultyServer("endless") as server:
        client = OpenAICompatibleBackend(
            server.base_url, model="m", api_key_env=None, timeout=20.0, max_retries=2, max_reply_bytes=4 * MiB
        )
        with PeakRSS() as rss, pytest.raises(BackendError, match="larger than max_reply_bytes=4194304"):
            client.chat([user_message("hi")])
        client.close()
    assert server.requests == 1  # a reply too large is not asked again
    assert rss.growth < 48 * MiB, f"RSS grew by {rss.growth / MiB:.1f} MiB"


def test_a_reply_announcing_more_than_the_cap_is_not_read():
    big = completion("x" * 4096)
    with LoopbackOpenAIServer([big]) as server:
        client = OpenAICompatibleBackend(server.base_url, model="m", api_key_env=None, max_reply_bytes=1024)
        with pytest.raises(BackendError, match="max_reply_bytes=1024"):
            client.chat([user_message("hi")])


def test_replies_under_the_cap_pass_and_a_tiny_cap_is_refused():
    with LoopbackOpenAIServer([completion("fine")]) as server:
        client = OpenAICompatibleBackend(server.base_url, model="m", api_key_env=None, max_reply_bytes=4096)
        assert client.chat([user_message("hi")]) == ["fine"]
    with pytest.raises(UserInputError, match="max_reply_bytes=10"):
        OpenAICompatibleBackend("http://127.0.0.1:1/v1", model="m", max_reply_bytes=10)
