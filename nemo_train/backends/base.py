"""The chat interface every language-model backend implements."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from typing_extensions import Unpack  # typing.Unpack needs Python 3.11

from nemo_train.backends.cache import ResponseCache, cache_key
from nemo_train.backends.jsonparse import extract_json
from nemo_train.backends.messages import Message, assistant_message, to_openai_messages, user_message
from nemo_train.backends.providers import ANY_OBJECT
from nemo_train.errors import UserInputError
from nemo_train.secrets import scrub_text, secret_env_values, secret_values_in

log = logging.getLogger(__name__)

REASK_TEXT = (
    "Your previous reply could not be read as a JSON object. Reply again with only the JSON object "
    "asked for above, with no text before or after it."
)


class Sampling(TypedDict, total=False):
    """How replies are sampled: the keyword arguments every chat method takes (defaults in :data:`SAMPLING`)."""

    #: number of replies
    n: int
    #: 0 is greedy decoding
    temperature: float
    max_tokens: int
    #: seed of the sampling (``None``: unseeded)
    seed: int | None


#: The sampling of a request that sets none of :class:`Sampling`'s keys.
SAMPLING = Sampling(n=1, temperature=0.0, max_tokens=512, seed=None)


def with_defaults(sampling: Sampling) -> Sampling:
    """``sampling`` with every key :data:`SAMPLING` has and it lacks."""
    return Sampling(**{**SAMPLING, **sampling})


class BackendError(RuntimeError):
    """A request failed for good (after its retries, or at once for a client error such as HTTP 401)."""


class MalformedReplyError(BackendError):
    """A reply asked for as JSON stayed malformed after its re-asks (raised only inside :func:`strict_json`)."""


_STRICT_JSON: ContextVar[bool] = ContextVar("strict_json", default=False)


@contextmanager
def strict_json() -> Iterator[None]:
    """Within this block :meth:`ChatBackend.chat_json_batch` raises :class:`MalformedReplyError` (naming the
    backend) for a reply that stays malformed, instead of returning ``None`` for it. A run that stores results
    uses it so that such a sample is recorded as failed and asked again by the next run, never stored as a
    finished result without the reply's content."""
    token = _STRICT_JSON.set(True)
    try:
        yield
    finally:
        _STRICT_JSON.reset(token)


@dataclass
class BackendStats:
    """Counters of one backend: requests sent, cache hits, retries, JSON replies, re-asks and failures.

    ``json_replies`` counts the first replies read as JSON, ``json_reasked`` those of them that needed at
    least one re-ask (``json_reasks`` counts the re-ask requests, several rounds each), ``constrained`` the
    requests whose reply the endpoint was asked to constrain to a JSON schema (or JSON mode) and
    ``budget_retries`` the requests sent again with a larger budget after hidden reasoning used up the first.
    """

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    json_replies: int = 0
    json_reasked: int = 0
    json_reasks: int = 0
    json_failures: int = 0
    constrained: int = 0
    budget_retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    @property
    def reask_share(self) -> float:
        """The share of JSON replies that needed a re-ask (NaN before any JSON reply)."""
        return self.json_reasked / self.json_replies if self.json_replies else float("nan")


class ChatBackend(ABC):
    """A chat model: OpenAI-format messages in (text and image parts), ``n`` reply strings out.

    Subclasses implement :meth:`_generate`; this class adds the on-disk cache (a request equal in
    model, messages and parameters is answered from disk), batches run over a thread pool of
    ``concurrency`` workers, and :meth:`chat_json` (JSON extraction, a bounded re-ask, ``None`` for a
    reply that stays malformed: recorded in :attr:`stats` and forgotten by the cache, raised only inside
    :func:`strict_json`).
    """

    #: name of the model, part of every cache key
    model: str = "unknown"

    def __init__(self, cache: ResponseCache | str | Path | None = None, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise UserInputError(f"concurrency={concurrency}; expected an integer >= 1")
        self.cache = ResponseCache(cache) if isinstance(cache, (str, Path)) else cache
        self.concurrency = concurrency
        self.stats = BackendStats()

    # ----------------------------------------------------------------- to implement
    @abstractmethod
    def _generate(
        self, messages: list[Message], *, n: int, temperature: float, max_tokens: int, seed: int | None
    ) -> list[str]:
        """Send one request and return exactly ``n`` replies (no caching here)."""

    def cache_params(self) -> dict[str, Any]:
        """Backend settings that change replies and so belong in the cache key (never secrets)."""
        return {}

    def constrains(self, schema: dict[str, Any] | None) -> bool:
        """Whether this backend can have its replies constrained to the JSON ``schema`` (``False`` here:
        replies are parsed and malformed ones re-asked)."""
        return False

    def fingerprint(self) -> dict[str, Any]:
        """What changes this backend's replies (for result fingerprints): class, model and the settings of
        :meth:`cache_params` except the endpoint's address (the same model served elsewhere answers the same)."""
        params = {k: v for k, v in self.cache_params().items() if k != "base_url"}
        return {"class": type(self).__name__, "model": self.model, **params}

    def attach_cache(self, path: str | Path) -> None:
        """Use an on-disk reply cache at ``path`` unless one was configured."""
        if self.cache is None:
            self.cache = ResponseCache(path)

    def secret_values(self) -> set[str]:
        """Secret strings that must never leave this backend: values of secret-looking environment variables and
        values under secret-looking keys of its options (a key given inline in ``extra_body``)."""
        return secret_env_values() | secret_values_in({k: v for k, v in vars(self).items() if k != "cache"})

    def scrub(self, text: str) -> str:
        """``text`` with every configured secret and key-shaped string replaced (before it is cached, stored or
        logged; :func:`nemo_train.secrets.scrub_text`)."""
        return scrub_text(text, self.secret_values())

    # ----------------------------------------------------------------- public API
    def chat(
        self, messages: list[Message], *, schema: dict[str, Any] | None = None, **sampling: Unpack[Sampling]
    ) -> list[str]:
        """``n`` replies to ``messages``; served from the cache when this exact request was made before.

        ``schema`` (a JSON schema) asks for replies constrained to it where :meth:`constrains` says the
        backend can; elsewhere it is ignored."""
        settings = with_defaults(sampling)
        schema = schema if self.constrains(schema) else None
        key = self._request_key(messages, {**settings, "schema": schema})
        cached = self._cached(key, settings["n"])
        if cached is not None:
            return cached
        self.stats.add("requests")
        if schema is None:
            return self._store(key, self._generate(messages, **settings), settings["n"])
        self.stats.add("constrained")
        return self._store(key, self._generate(messages, schema=schema, **settings), settings["n"])

    def _request_key(self, messages: list[Message], sampling: dict[str, Any]) -> str | None:
        """The cache key of ``chat(messages, **sampling)`` (its ``schema`` counted where :meth:`constrains` says)."""
        settings = dict(sampling)
        schema = settings.pop("schema", None)
        schema = schema if self.constrains(schema) else None
        return self._cache_key(
            messages, **with_defaults(settings), **({"schema": schema} if schema is not None else {})
        )

    def _cache_key(
        self,
        messages: list[Message],
        *,
        n: int,
        temperature: float,
        max_tokens: int,
        seed: int | None,
        schema: dict[str, Any] | None = None,
    ) -> str | None:
        """Check the request parameters; the cache key of the request (``None`` without a cache)."""
        if n < 1:
            raise UserInputError(f"n={n}; expected an integer >= 1")
        if temperature < 0:
            raise UserInputError(f"temperature={temperature}; expected a value >= 0")
        if self.cache is None:
            return None
        params = {"n": n, "temperature": temperature, "max_tokens": max_tokens, "seed": seed}
        if schema is not None:
            params["schema"] = schema
        return cache_key(self.model, to_openai_messages(messages), {**params, **self.cache_params()})

    def _cached(self, key: str | None, n: int) -> list[str] | None:
        cached = self.cache.get(key) if key is not None else None
        if cached is not None and len(cached) == n:
            self.stats.add("cache_hits")
            return list(cached)
        return None

    def _store(self, key: str | None, replies: list[str], n: int) -> list[str]:
        """Scrub secrets from ``replies``, cache them under ``key`` and return them."""
        if len(replies) != n:
            raise BackendError(f"{type(self).__name__} returned {len(replies)} replies; expected n={n}")
        replies = [self.scrub(reply) for reply in replies]
        if key is not None:
            self.cache.put(key, replies, model=self.model)
        return replies

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        """``fn`` over ``items``, ``concurrency`` at a time, results in input order."""
        if self.concurrency == 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(fn, items))

    def chat_batch(
        self, conversations: list[list[Message]], *, schema: dict[str, Any] | None = None, **sampling: Unpack[Sampling]
    ) -> list[list[str]]:
        """:meth:`chat` on each conversation, ``concurrency`` at a time; results in input order."""
        return self._map(lambda messages: self.chat(messages, schema=schema, **sampling), conversations)

    def chat_json(
        self,
        messages: list[Message],
        *,
        max_reasks: int = 2,
        schema: dict[str, Any] | None = None,
        **sampling: Unpack[Sampling],
    ) -> list[dict[str, Any] | None]:
        """``n`` replies parsed as JSON objects; ``None`` where a reply stays malformed.

        Where the backend :meth:`constrains` replies, the endpoint is asked for ``schema`` (or for any JSON
        object when ``schema`` is ``None``), so replies come back well formed. Otherwise, or when a reply is
        still malformed, it is re-asked (the bad reply plus a request for the bare JSON object) up to
        ``max_reasks`` times; after that it counts in ``stats.json_failures``, the cached replies of its requests
        are removed (a later run asks again rather than replaying it) and it is returned as ``None``, so one bad
        reply never stops a run; inside :func:`strict_json` it raises :class:`MalformedReplyError` instead.
        """
        return self.chat_json_batch([messages], max_reasks=max_reasks, schema=schema, **sampling)[0]

    def chat_json_batch(
        self,
        conversations: list[list[Message]],
        *,
        max_reasks: int = 2,
        schema: dict[str, Any] | None = None,
        **sampling: Unpack[Sampling],
    ) -> list[list[dict[str, Any] | None]]:
        """:meth:`chat_json` on each conversation: the first replies through one :meth:`chat_batch` call (so a
        backend that batches generation does), then each round of re-asks of the still malformed replies
        through one more :meth:`chat_batch` call (one reply each, the same sampling otherwise)."""
        schema = schema if schema is not None else ANY_OBJECT
        constrained = {"schema": schema} if self.constrains(schema) else {}
        sampling = {**sampling, **constrained}
        first = self.chat_batch(conversations, **sampling)
        parsed = [[extract_json(reply) for reply in replies] for replies in first]
        self.stats.add("json_replies", sum(len(replies) for replies in first))
        reask = {**sampling, "n": 1}
        # every malformed reply: its place, the conversation it was given in, and the requests that led to it
        pending = [
            ((i, j), conversations[i], reply, [(conversations[i], sampling)])
            for i, replies in enumerate(first)
            for j, reply in enumerate(replies)
            if parsed[i][j] is None
        ]
        self.stats.add("json_reasked", len(pending))
        for _ in range(max_reasks):
            if not pending:
                break
            self.stats.add("json_reasks", len(pending))
            asked = [
                conversation + [assistant_message(reply), user_message(REASK_TEXT)]
                for _, conversation, reply, _ in pending
            ]
            replies = [r[0] for r in self.chat_batch(asked, **reask)]
            still = []
            for ((i, j), _, _, requests), conversation, reply in zip(pending, asked, replies):
                parsed[i][j] = extract_json(reply)
                if parsed[i][j] is None:
                    still.append(((i, j), conversation, reply, [*requests, (conversation, reask)]))
            pending = still
        if pending:
            self._give_up([(reply, requests) for _, _, reply, requests in pending], max_reasks)
        return parsed

    def _give_up(self, failed: list[tuple[str, list[tuple[list[Message], dict[str, Any]]]]], max_reasks: int) -> None:
        """Count the replies that stayed malformed (``(last reply, the requests that led to it)``) and forget those
        requests' cached replies, so that a later run asks the model again instead of replaying the malformed
        ones (a reply repaired by a re-ask keeps its requests cached); raise inside :func:`strict_json`."""
        for reply, requests in failed:
            self.stats.add("json_failures")
            log.debug("%s: reply is not a JSON object after %d re-asks: %.80r", self.model, max_reasks, reply)
            for messages, sampling in requests:
                key = self._request_key(messages, sampling)
                if key is not None:
                    self.cache.discard(key)
        if _STRICT_JSON.get():
            count = f"{len(failed)} replies are" if len(failed) > 1 else "a reply is"
            raise MalformedReplyError(
                f"{type(self).__name__} {self.model!r}: {count} not JSON (no JSON object after {max_reasks} "
                f"re-asks): {failed[0][0][:80]!r}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
