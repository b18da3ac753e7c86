"""A backend for any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, OpenAI, other providers)."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import Any

import httpx

from nemo_train.backends.base import BackendError, ChatBackend
from nemo_train.backends.messages import Message, to_openai_messages
from nemo_train.errors import UserInputError
from nemo_train.secrets import REDACTED, scrub_secrets

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class OpenAICompatibleBackend(ChatBackend):
    """Chat completions over HTTP with retries, a concurrency limit and a reply cache.

    The API key is read from the environment variable ``api_key_env`` at each request (``None`` or an
    unset variable sends no ``Authorization`` header, as local vLLM servers need); it never enters
    logs, reprs, saved configs or cache keys. Requests that fail with HTTP 408/409/429/5xx, a timeout
    or a connection error are retried ``max_retries`` times with exponential backoff (``backoff *
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
        max_tokens_field: str = "max_tokens",
        drop_params: list[str] | None = None,
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

    def _scrub(self, text: str) -> str:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return scrub_secrets(text.replace(key, REDACTED) if key else text)

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        delay = min(self.max_backoff, self.backoff * 2**attempt) * (1 + 0.1 * random.random())
        if response is not None and "retry-after" in response.headers:
            try:
                delay = max(delay, float(response.headers["retry-after"]))
            except ValueError:
                pass
        return min(delay, self.max_backoff)

    def _post(self, body: dict[str, Any], n: int) -> list[str]:
        url = f"{self.base_url}/chat/completions"
        for attempt in range(self.max_retries + 1):
            response, problem = None, ""
            try:
                with self._slots:
                    response = self._client.post(url, json=body, headers=self._headers())
            except httpx.TimeoutException:
                problem = f"timed out after {self.timeout}s"
            except httpx.TransportError as err:
                problem = f"connection error ({type(err).__name__})"
            if response is not None:
                if response.status_code == 200:
                    return self._replies(response, n)
                problem = f"HTTP {response.status_code}"
                if response.status_code not in RETRY_STATUS:
                    hint = (
                        f"; is ${self.api_key_env} set?"
                        if response.status_code in (401, 403) and self.api_key_env
                        else ""
                    )
                    # the body is the server's words: scrub any echoed secret before it reaches a log
                    raise BackendError(self._scrub(f"{self.model} at {url}: {problem}: {response.text[:200]!r}{hint}"))
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, response)
            self.stats.add("retries")
            log.warning(
                "%s at %s: %s; retry %d/%d in %.2fs", self.model, url, problem, attempt + 1, self.max_retries, delay
            )
            time.sleep(delay)
        raise BackendError(f"{self.model} at {url}: {problem} after {self.max_retries} retries")

    def _replies(self, response: httpx.Response, n: int) -> list[str]:
        try:
            choices = sorted(response.json()["choices"], key=lambda c: c.get("index", 0))
            replies = [c["message"].get("content") or "" for c in choices]
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise BackendError(
                self._scrub(f"{self.model}: unexpected response body ({type(err).__name__}): {response.text[:200]!r}")
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
