"""A backend for any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, OpenAI, other providers)."""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from typing import Any, Literal

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from nemo_train.backends.base import BackendError, ChatBackend
from nemo_train.backends.messages import Message, to_openai_messages
from nemo_train.backends.providers import RULES, ModelFamily, ReasoningEffort, constrains, family_of, response_format
from nemo_train.errors import UserInputError

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

#: Default bound on one reply's body: far above any chat completion (a few KiB of text), far below memory.
MAX_REPLY_BYTES = 8 * 2**20


class _Retryable(Exception):
    """A failed attempt worth retrying (transport error, timeout, 408/409/429/5xx, a body that is not JSON)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAICompatibleBackend(ChatBackend):
    """Chat completions over HTTP with retries, a concurrency limit and a reply cache.

    The API key is read from the environment variable ``api_key_env`` at each request (``None`` or an
    unset variable sends no ``Authorization`` header, as local vLLM servers need); it never enters
    logs, reprs, saved configs, cache keys or cached replies (an echoing server's reply is scrubbed). Each
    attempt has a wall-clock deadline of ``timeout`` seconds for connecting and receiving the whole body
    (a server that trickles bytes cannot hold it longer), and a reply body may hold at most ``max_reply_bytes``
    bytes: the body is read in chunks and the request abandoned (:class:`BackendError`, not retried) once it
    announces or sends more, so a server streaming an endless body cannot push memory up. Attempts that fail with HTTP 408/409/429/5xx, a
    timeout, a connection error, a body cut short or a body that is not JSON are retried ``max_retries`` times with exponential backoff (``backoff *
    2**attempt`` seconds, capped at ``max_backoff``, with jitter; a ``Retry-After`` header is obeyed
    up to that cap). Other HTTP errors (400, 401, 404, ...) raise :class:`BackendError` at once. At
    most ``concurrency`` requests are in flight at a time, however many threads call :meth:`chat`.

    Request fields follow the model's ``family`` (``"auto"``: read from the model name, see
    :func:`nemo_train.backends.providers.family_of`): OpenAI reasoning models get ``max_completion_tokens``,
    no ``temperature`` and ``reasoning_effort``; Claude gets one reply per request and a temperature of at
    most 1; Gemini gets ``reasoning_effort``; vLLM (any other model) the plain fields. For families whose
    hidden reasoning is paid out of the reply budget (OpenAI reasoning models, Gemini) ``reasoning_budget``
    tokens are added to each request's budget, and a reply that still comes back empty with
    ``finish_reason: "length"`` is asked once more with four times the budget (then :class:`BackendError`).
    :meth:`chat_json` asks for its JSON schema (``response_format`` ``json_schema``) where the family
    constrains output (OpenAI, Gemini, vLLM), JSON mode where only that exists, and falls back to re-asking
    elsewhere (Claude); ``structured_output=False`` turns this off.

    ``native_n`` (``None``: the family's) ``False`` sends ``n`` separate requests (seeds ``seed``,
    ``seed+1``, ...). ``json_mode=True`` asks every request for ``response_format={"type": "json_object"}``.
    ``max_tokens_field`` overrides the family's budget field, ``drop_params`` leaves fields out
    (``["temperature", "seed"]``); ``extra_body`` is merged into every request body.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        concurrency: int = 4,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        native_n: bool | None = None,
        json_mode: bool = False,
        extra_body: dict[str, Any] | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        drop_params: list[Literal["temperature", "seed", "n", "max_tokens", "max_completion_tokens"]] | None = None,
        cache: Any = None,
        family: ModelFamily = "auto",
        reasoning_effort: ReasoningEffort | None = "low",
        reasoning_budget: int = 2048,
        structured_output: bool = True,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        super().__init__(cache=cache, concurrency=concurrency)
        if not base_url.startswith(("http://", "https://")):
            raise UserInputError(
                f"base_url={base_url!r}; expected an http:// or https:// URL such as http://localhost:8000/v1"
            )
        if timeout <= 0 or max_retries < 0 or backoff < 0:
            raise UserInputError(
                f"timeout={timeout}, max_retries={max_retries}, backoff={backoff}; expected timeout > 0 and the others >= 0"
            )
        if max_reply_bytes < 1024:
            raise UserInputError(f"max_reply_bytes={max_reply_bytes}; expected at least 1024 bytes per reply")
        self.max_reply_bytes = max_reply_bytes
        if reasoning_budget < 0:
            raise UserInputError(f"reasoning_budget={reasoning_budget}; expected an integer >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.family = family_of(model) if family == "auto" else family
        self.rules = RULES[self.family]
        self.reasoning_effort = reasoning_effort if self.rules.effort else None
        self.reasoning_budget = reasoning_budget if self.rules.thinks else 0
        self.structured_output = structured_output
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.native_n = self.rules.native_n if native_n is None else native_n
        self.json_mode = json_mode
        self.extra_body = dict(extra_body or {})
        self.max_tokens_field = max_tokens_field or self.rules.tokens_field
        self.drop_params = list(drop_params or [])
        droppable = {"temperature", "seed", "n", "max_tokens", self.max_tokens_field}
        if not set(self.drop_params) <= droppable:
            raise UserInputError(f"drop_params={self.drop_params}; expected names among {sorted(droppable)}")
        self._slots = threading.BoundedSemaphore(concurrency)
        self._client = httpx.Client(timeout=timeout)

    def cache_params(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "json_mode": self.json_mode,
            "extra_body": self.extra_body,
            "max_tokens_field": self.max_tokens_field,
            "drop_params": self.drop_params,
            "family": self.family,
            "reasoning_effort": self.reasoning_effort,
            "reasoning_budget": self.reasoning_budget,
        }

    def constrains(self, schema: dict[str, Any] | None) -> bool:
        return self.structured_output and constrains(self.rules, schema)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _body(
        self,
        messages: list[Message],
        n: int,
        temperature: float,
        max_tokens: int,
        seed: int | None,
        schema: dict[str, Any] | None = None,
    ) -> dict:
        """The request body, with the fields this model's family accepts."""
        openai_messages = to_openai_messages(messages)
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages}
        if self.rules.temperature is not None:
            low, high = self.rules.temperature
            body["temperature"] = min(max(temperature, low), high)
        body[self.max_tokens_field] = max_tokens + self.reasoning_budget
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if n != 1:
            body["n"] = n
        if seed is not None and self.rules.seed:
            body["seed"] = seed
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        if schema is not None:
            constraint = response_format(self.rules, schema, openai_messages)
            if constraint is not None:
                body["response_format"] = constraint
        for name in self.drop_params:
            body.pop(name, None)
        body.update(self.extra_body)
        return body

    def _generate(self, messages, *, n, temperature, max_tokens, seed, schema=None) -> list[str]:
        if self.native_n or n == 1:
            return self._post_budgeted(self._body(messages, n, temperature, max_tokens, seed, schema), n)
        replies = []
        for i in range(n):
            body = self._body(messages, 1, temperature, max_tokens, None if seed is None else seed + i, schema)
            replies += self._post_budgeted(body, 1)
        return replies

    def _post_budgeted(self, body: dict[str, Any], n: int) -> list[str]:
        """:meth:`_post`; a reply left empty because hidden reasoning used up the budget is asked once more
        with four times the budget, and :class:`BackendError` is raised if it is still empty."""
        replies, finished = self._post(body, n)
        field = self.max_tokens_field
        if not self.rules.thinks or field not in body or not self._cut_empty(replies, finished):
            return replies
        self.stats.add("budget_retries")
        replies, finished = self._post({**body, field: 4 * body[field]}, n)
        if self._cut_empty(replies, finished):
            raise BackendError(
                f"{self.model}: replies empty with finish_reason 'length' at {field}={4 * body[field]}: "
                "hidden reasoning used the budget; raise reasoning_budget or lower reasoning_effort"
            )
        return replies

    @staticmethod
    def _cut_empty(replies: list[str], finished: list[str | None]) -> bool:
        return any(not reply and reason == "length" for reply, reason in zip(replies, finished))

    def secret_values(self) -> set[str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return super().secret_values() | ({key} if key else set())

    def _scrub(self, text: str) -> str:
        return self.scrub(text)

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with 10 % jitter, raised to a ``Retry-After`` header, capped at ``max_backoff``."""
        attempt = state.attempt_number - 1
        delay = min(self.max_backoff, self.backoff * 2**attempt) * (1 + 0.1 * random.random())
        error = state.outcome.exception() if state.outcome is not None else None
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_backoff)

    def _before_sleep(self, state: RetryCallState) -> None:
        self.stats.add("retries")
        log.warning(
            "%s: %s; retry %d/%d in %.2fs",
            self.model,
            state.outcome.exception(),
            state.attempt_number,
            self.max_retries,
            state.next_action.sleep if state.next_action else 0.0,
        )

    def _post(self, body: dict[str, Any], n: int) -> tuple[list[str], list[str | None]]:
        """One request with its retries (tenacity): its replies and their finish reasons;
        :class:`BackendError` when the retries are used up."""
        url = f"{self.base_url}/chat/completions"
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            sleep=lambda seconds: time.sleep(seconds),  # looked up at call time (tests patch time.sleep)
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            payload = retrying(self._attempt_with_deadline, url, body)
        except _Retryable as err:
            raise BackendError(self._scrub(f"{self.model} at {url}: {err} after {self.max_retries} retries")) from None
        return self._replies(payload, n)

    def _attempt_with_deadline(self, url: str, body: dict[str, Any]) -> Any:
        """One attempt, bounded in wall-clock time: connection, headers and the whole body within ``timeout``.

        The attempt runs in a worker thread; when the deadline passes first the caller moves on (a
        retry or a failure) and the worker stops at its next chunk or read timeout.
        """
        outcome: dict[str, Any] = {}
        deadline = time.monotonic() + self.timeout
        worker = threading.Thread(target=self._attempt, args=(url, body, deadline, outcome), daemon=True)
        with self._slots:
            worker.start()
            worker.join(self.timeout)
        if worker.is_alive():
            outcome["abandoned"] = True
            raise _Retryable(f"timed out after {self.timeout}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["payload"]

    def _attempt(self, url: str, body: dict[str, Any], deadline: float, outcome: dict[str, Any]) -> None:
        try:
            with self._client.stream("POST", url, json=body, headers=self._headers()) as response:
                self._check_size(url, response.headers.get("content-length"))
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    if outcome.get("abandoned") or time.monotonic() > deadline:
                        raise _Retryable(f"timed out after {self.timeout}s")
                    size += len(chunk)
                    self._check_size(url, size)
                    chunks.append(chunk)
                raw = b"".join(chunks)
            outcome["payload"] = self._check(url, response, raw)
        except httpx.TimeoutException:
            outcome["error"] = _Retryable(f"timed out after {self.timeout}s")
        except httpx.TransportError as err:  # refused, reset, or a body cut short (RemoteProtocolError)
            outcome["error"] = _Retryable(f"connection error ({type(err).__name__})")
        except (_Retryable, BackendError) as err:
            outcome["error"] = err

    def _check_size(self, url: str, size: int | str | None) -> None:
        """:class:`BackendError` once a reply announces or has sent more than ``max_reply_bytes`` (leaving the
        ``with`` block closes the connection, so the rest of the body is never read)."""
        try:
            size = int(size) if size is not None else 0
        except ValueError:
            size = 0
        if size > self.max_reply_bytes:
            raise BackendError(
                f"{self.model} at {url}: reply body larger than max_reply_bytes={self.max_reply_bytes} "
                f"({size} bytes announced or read); abandoned"
            )

    def _check(self, url: str, response: httpx.Response, raw: bytes) -> Any:
        """The parsed JSON body of a 200 reply; retryable or final errors otherwise."""
        text = raw.decode("utf-8", errors="replace")
        status = response.status_code
        if status in RETRY_STATUS or status >= 500:
            retry_after = None
            try:
                retry_after = float(response.headers.get("retry-after", ""))
            except ValueError:
                pass
            raise _Retryable(f"HTTP {status}", retry_after)
        if status != 200:
            hint = f"; is ${self.api_key_env} set?" if status in (401, 403) and self.api_key_env else ""
            # the body is the server's words: scrub any echoed secret before it reaches a log
            raise BackendError(self._scrub(f"{self.model} at {url}: HTTP {status}: {text[:200]!r}{hint}"))
        try:
            return json.loads(text)
        except ValueError:
            raise _Retryable(self._scrub(f"reply body is not JSON ({len(raw)} bytes): {text[:80]!r}")) from None

    def _replies(self, payload: Any, n: int) -> tuple[list[str], list[str | None]]:
        try:
            choices = sorted(payload["choices"], key=lambda c: c.get("index", 0))
            replies = [c["message"].get("content") or "" for c in choices]
            finished = [c.get("finish_reason") for c in choices]
        except (KeyError, TypeError, AttributeError) as err:
            raise BackendError(
                self._scrub(f"{self.model}: unexpected response body ({type(err).__name__}): {str(payload)[:200]!r}")
            ) from None
        if len(replies) != n:
            raise BackendError(f"{self.model}: {len(replies)} choices for n={n}; set native_n=False for this endpoint")
        return replies, finished

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleBackend(base_url={self.base_url!r}, model={self.model!r}, family={self.family!r}, "
            f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency})"
        )
