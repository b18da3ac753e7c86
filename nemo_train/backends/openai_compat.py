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
from nemo_train.errors import UserInputError

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


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
    (a server that trickles bytes cannot hold it longer). Attempts that fail with HTTP 408/409/429/5xx, a
    timeout, a connection error, a body cut short or a body that is not JSON are retried ``max_retries`` times with exponential backoff (``backoff *
    2**attempt`` seconds, capped at ``max_backoff``, with jitter; a ``Retry-After`` header is obeyed
    up to that cap). Other HTTP errors (400, 401, 404, ...) raise :class:`BackendError` at once. At
    most ``concurrency`` requests are in flight at a time, however many threads call :meth:`chat`.

    ``native_n=False`` sends ``n`` separate requests (seeds ``seed``, ``seed+1``, ...) for endpoints
    that ignore the ``n`` field. ``json_mode=True`` asks for ``response_format={"type": "json_object"}``.
    Some models take other fields: ``max_tokens_field="max_completion_tokens"`` (OpenAI reasoning
    models), ``drop_params=["temperature", "seed"]`` (fields an endpoint rejects are left out);
    ``extra_body`` is merged into every request body.
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
        native_n: bool = True,
        json_mode: bool = False,
        extra_body: dict[str, Any] | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        drop_params: list[Literal["temperature", "seed", "n", "max_tokens", "max_completion_tokens"]] | None = None,
        cache: Any = None,
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
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.native_n = native_n
        self.json_mode = json_mode
        self.extra_body = dict(extra_body or {})
        self.max_tokens_field = max_tokens_field
        self.drop_params = list(drop_params or [])
        droppable = {"temperature", "seed", "n", "max_tokens", max_tokens_field}
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
        }

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _body(self, messages: list[Message], n: int, temperature: float, max_tokens: int, seed: int | None) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "temperature": temperature,
            self.max_tokens_field: max_tokens,
        }
        if n != 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        for name in self.drop_params:
            body.pop(name, None)
        body.update(self.extra_body)
        return body

    def _generate(self, messages, *, n, temperature, max_tokens, seed) -> list[str]:
        if self.native_n or n == 1:
            return self._post(self._body(messages, n, temperature, max_tokens, seed), n)
        replies = []
        for i in range(n):
            replies += self._post(
                self._body(messages, 1, temperature, max_tokens, None if seed is None else seed + i), 1
            )
        return replies

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

    def _post(self, body: dict[str, Any], n: int) -> list[str]:
        """One request with its retries (tenacity); :class:`BackendError` when they are used up."""
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
                chunks = []
                for chunk in response.iter_bytes():
                    if outcome.get("abandoned") or time.monotonic() > deadline:
                        raise _Retryable(f"timed out after {self.timeout}s")
                    chunks.append(chunk)
                raw = b"".join(chunks)
            outcome["payload"] = self._check(url, response, raw)
        except httpx.TimeoutException:
            outcome["error"] = _Retryable(f"timed out after {self.timeout}s")
        except httpx.TransportError as err:  # refused, reset, or a body cut short (RemoteProtocolError)
            outcome["error"] = _Retryable(f"connection error ({type(err).__name__})")
        except (_Retryable, BackendError) as err:
            outcome["error"] = err

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

    def _replies(self, payload: Any, n: int) -> list[str]:
        try:
            choices = sorted(payload["choices"], key=lambda c: c.get("index", 0))
            replies = [c["message"].get("content") or "" for c in choices]
        except (KeyError, TypeError, AttributeError) as err:
            raise BackendError(
                self._scrub(f"{self.model}: unexpected response body ({type(err).__name__}): {str(payload)[:200]!r}")
            ) from None
        if len(replies) != n:
            raise BackendError(f"{self.model}: {len(replies)} choices for n={n}; set native_n=False for this endpoint")
        return replies

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleBackend(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency})"
        )
