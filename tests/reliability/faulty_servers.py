"""Misbehaving HTTP servers on 127.0.0.1 for fault-injection tests: each answers every request the same bad way.

``FaultyServer(kind)`` with ``kind`` one of ``trickle`` (a valid reply, one byte every ``interval``
seconds), ``truncated`` (announces more bytes than it sends, then closes), ``cut_json`` (a complete
reply holding half a JSON body), ``not_json`` (200 with an HTML body), ``endless`` (200 without a length,
streaming spaces fast until the client hangs up), ``error`` (HTTP 500), ``hang`` (never answers
until the server closes). ``fail_first`` bad answers are followed by good ones (``reply`` text) when set.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion_bytes(text: str, n: int = 1) -> bytes:
    choices = [{"index": i, "message": {"role": "assistant", "content": text}} for i in range(n)]
    return json.dumps({"id": "x", "object": "chat.completion", "choices": choices}).encode()


class FaultyServer:
    """A loopback server answering ``fail_first`` requests (all of them if ``None``) with the fault ``kind``."""

    def __init__(self, kind: str, fail_first: int | None = None, reply: str = "ok", interval: float = 0.5) -> None:
        self.kind, self.fail_first, self.reply, self.interval = kind, fail_first, reply, interval
        self.requests = 0
        self._pause = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"null")
                with server._lock:
                    server.requests += 1
                    bad = server.fail_first is None or server.requests <= server.fail_first
                try:
                    server._answer(self, bad, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def _answer(self, handler: BaseHTTPRequestHandler, bad: bool, body: Any) -> None:
        n = (body or {}).get("n", 1)
        payload = completion_bytes(self.reply, n)
        if not bad:
            self._send(handler, 200, payload)
        elif self.kind == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            for byte in payload:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                self._pause.wait(self.interval)  # not time.sleep: tests may patch it away
        elif self.kind == "truncated":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload[: len(payload) // 2])
            handler.wfile.flush()
            handler.close_connection = True
        elif self.kind == "cut_json":  # a complete HTTP reply whose JSON body was cut (a proxy's buffer limit)
            self._send(handler, 200, payload[: len(payload) // 2])
        elif self.kind == "endless":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Connection", "close")  # no length: the body ends when the connection does
            handler.end_headers()
            handler.close_connection = True
            chunk = b" " * 65536
            while not self._pause.is_set():  # until the client closes the connection (BrokenPipe) or shutdown
                handler.wfile.write(chunk)
        elif self.kind == "error":
            self._send(handler, 500, b'{"error": {"message": "internal error"}}')
        elif self.kind == "hang":
            self._pause.wait()
        elif self.kind == "not_json":
            self._send(handler, 200, b"<html><body>502 Bad Gateway (proxy)</body></html>", "text/html")
        else:
            raise ValueError(f"unknown fault {self.kind!r}")

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, kind: str = "application/json") -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def __enter__(self) -> FaultyServer:
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pause.set()  # releases hanging and endless answers
        self._http.shutdown()
        self._http.server_close()
