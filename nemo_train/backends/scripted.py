"""A backend that returns scripted replies and records every request (for tests and dry runs)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from typing_extensions import Unpack

from nemo_train.backends.base import BackendError, ChatBackend, Sampling
from nemo_train.backends.messages import Message

Responder = Callable[[list[Message]], str]


class ScriptedBackend(ChatBackend):
    """Replies from a script: a list of strings used in order, or a function of the messages.

    Every request is appended to :attr:`calls` as ``{"messages", "n", "temperature", "max_tokens",
    "seed"}``, and the number of conversations of every :meth:`chat_batch` call to :attr:`batches`. A list script that runs out raises :class:`BackendError`; with ``concurrency > 1`` a
    list is handed out in the order threads arrive, so use a function of the messages there.
    """

    def __init__(self, script: Iterable[str] | Responder, model: str = "scripted", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self._responder = script if callable(script) else None
        self._queue = None if callable(script) else list(script)
        self.calls: list[dict[str, Any]] = []
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def chat_batch(self, conversations: list[list[Message]], **sampling: Unpack[Sampling]) -> list[list[str]]:
        self.batches.append(len(conversations))
        return super().chat_batch(conversations, **sampling)

    def _generate(self, messages, *, n, temperature, max_tokens, seed) -> list[str]:
        with self._lock:
            self.calls.append(
                {"messages": messages, "n": n, "temperature": temperature, "max_tokens": max_tokens, "seed": seed}
            )
            if self._responder is not None:
                return [str(self._responder(messages)) for _ in range(n)]
            if len(self._queue) < n:
                raise BackendError(f"scripted backend {self.model!r} ran out of replies")
            replies, self._queue = self._queue[:n], self._queue[n:]
            return replies
