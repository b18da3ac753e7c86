"""A scripted OpenAI-compatible ``/chat/completions`` server on 127.0.0.1, for backend tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: HTTP status, JSON body, extra headers, and a delay before answering."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(*contents: str, model: str = "test-model") -> Reply:
    """A 200 reply with one choice per content string."""
    choices = [
        {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        for i, text in enumerate(contents)
    ]
    return Reply(200, {"id": "cmpl-test", "object": "chat.completion", "model": model, "choices": choices})


def error(status: int, **headers: str) -> Reply:
    """An error reply (e.g. 429 with ``retry_after="0"``)."""
    return Reply(
        status, {"error": {"message": f"scripted {status}"}}, {k.replace("_", "-"): v for k, v in headers.items()}
    )


class LoopbackOpenAIServer:
    """Serve scripted replies in order (or from ``responder(request) -> Reply``) and record requests.

    Each recorded request is ``{"path", "headers" (lower-case names), "body" (parsed JSON)}``. Use as a
    context manager; ``base_url`` ends in ``/v1``.
    """

    def __init__(self, script: list[Reply] | Callable[[dict], Reply]) -> None:
        self._script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                request = {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw or b"null"),
                }
                reply = server._next(request)
                if reply.delay:
                    time.sleep(reply.delay)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if not callable(self._script):
                return self._script.pop(0) if self._script else error(500)
        return self._script(request)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> LoopbackOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
