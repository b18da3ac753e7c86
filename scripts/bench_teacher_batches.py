"""Seconds per labelled error of the SciTX distillation teacher, one error at a time vs in batches.

    python scripts/bench_teacher_batches.py --classifier checkpoints/cmnist_model_a/checkpoints/best.ckpt \
        [--errors 32] [--m 4] [--latency 0.05] [--concurrency 8] [--batches 1 4 16]

The teacher's MLLM is a scripted OpenAI-compatible endpoint on 127.0.0.1 (NOT a model: it names a colour
picked from the error's true class as the hypothesis and reads the edit back from it) that waits
``--latency`` seconds before every reply, as a remote API does. Each row runs ``distill-teacher`` (SciTX,
``m`` hypotheses, CMNIST mining errors) into a fresh output folder with ``error_batch`` set to the row's
value and counts the endpoint's requests, the backend's request rounds (``chat_batch`` calls) and the wall
time (median of ``--repeats`` runs). The labels of every row must equal those of the first row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.backends import OpenAICompatibleBackend  # noqa: E402
from nemo_train.console import print_table  # noqa: E402
from nemo_train.nemo.distill.labelling import distill_teacher  # noqa: E402

COLOURS = ("red", "green", "blue", "yellow", "magenta")


def _reply(body: dict) -> list[str]:
    """The scripted answers to one chat request (hypotheses, an attribute edit, or a caption)."""
    text = "\n".join(
        part.get("text", "") if isinstance(part, dict) else str(part)
        for message in body["messages"]
        for part in (message["content"] if isinstance(message["content"], list) else [message["content"]])
    )
    n = int(body.get("n") or 1)
    if "Suspected reason for the mistake" in text:
        colour = re.search(r"should be (\w+)", text)[1]
        return [json.dumps({"attribute": "color", "value": colour})]
    if "cause_of_error" in text:
        true = int(re.search(r'class "(\d)"', text)[1])
        return [
            json.dumps({"cause_of_error": f"The digit should be {COLOURS[(true + i) % len(COLOURS)]}."})
            for i in range(n)
        ]
    return ["A handwritten digit."] * n


class ScriptedEndpoint:
    """``/v1/chat/completions`` on 127.0.0.1 answering :func:`_reply` after ``latency`` seconds; counts requests."""

    def __init__(self, latency: float) -> None:
        self.requests = 0
        lock, endpoint = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with lock:
                    endpoint.requests += 1
                time.sleep(latency)
                choices = [
                    {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
                    for i, c in enumerate(_reply(body))
                ]
                payload = json.dumps({"choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"


class CountingBackend(OpenAICompatibleBackend):
    """The endpoint backend, counting its request rounds (``chat_batch`` calls)."""

    rounds = 0

    def chat_batch(self, conversations, **sampling):
        self.rounds += 1
        return super().chat_batch(conversations, **sampling)


def run(args, endpoint: ScriptedEndpoint, error_batch: int, root: Path) -> tuple[float, int, int, dict]:
    times, requests, rounds, labels = [], 0, 0, {}
    for repeat in range(args.repeats):
        out = root / f"batch{error_batch}_{repeat}"
        backend = CountingBackend(endpoint.base_url, "scripted", api_key_env=None, concurrency=args.concurrency)
        before = endpoint.requests
        started = time.perf_counter()
        distill_teacher(
            args.classifier,
            out_dir=str(out),
            n=args.errors,
            styles=1,
            hypotheses=backend,
            m=args.m,
            min_cei=-100.0,
            views=["error"],
            val_fraction=0.0,
            error_batch=error_batch,
        )
        times.append(time.perf_counter() - started)
        requests, rounds = endpoint.requests - before, backend.rounds
        rows = [json.loads(line) for line in (out / "teacher.jsonl").read_text().splitlines()]
        labels = {r["sample_id"]: (r["edit"], r["cei"]) for r in rows}
    return statistics.median(times), requests, rounds, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classifier", required=True, help="a CMNIST classifier checkpoint")
    parser.add_argument("--errors", type=int, default=32)
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the endpoint waits per request")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at a time")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    endpoint = ScriptedEndpoint(args.latency)
    rows, reference = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for error_batch in args.batches:
            seconds, requests, rounds, labels = run(args, endpoint, error_batch, Path(tmp))
            reference = labels if reference is None else reference
            same = sum(labels.get(k) == v for k, v in reference.items())
            rows.append([error_batch, requests, rounds, seconds, seconds / len(labels), f"{same}/{len(reference)}"])
    print_table(
        ["error_batch", "endpoint requests", "request rounds", "s (median)", "s / error", "labels as row 1"],
        rows,
        title=f"SciTX teacher, m={args.m}, endpoint latency {args.latency:g} s, concurrency {args.concurrency}",
        digits=3,
    )
    endpoint.server.shutdown()


if __name__ == "__main__":
    main()
