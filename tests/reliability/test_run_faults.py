"""Faults around whole ``nemo-eval`` runs: a failing endpoint, a key-echoing one, a retrained checkpoint,
a changed setting, a damaged results file, a second run on the same ``out_dir``, bad files and folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_errors import one_line_error
from loopback_openai_server import LoopbackOpenAIServer, completion, error

import nemo_train.backends.openai_compat as openai_compat
from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.nemo.components import BenchmarkArgs, KnownCauseMethod, SciTXMethod
from nemo_train.nemo.run import nemo_eval
from nemo_train.scoring.editors import ExactEdit

pytestmark = pytest.mark.fault
ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-echoed-9876543210"
BENCH = BenchmarkArgs(n=3, test_styles=1)
KEYWORD_EDITS = ExactEdit(deriver="keyword")


def explainer_reply(request, echo: str = "") -> object:
    text = request["body"]["messages"][-1]["content"]
    text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text)
    if "Pick the ONE attribute" in text:
        return completion('{"attribute": "color", "value": "red"}')
    cause = f"The stroke colour is unusual; in training this digit was red. {echo}"
    return completion(*[json.dumps({"cause_of_error": cause})] * request["body"].get("n", 1))


def test_failing_endpoint_is_recorded_the_run_goes_on_and_a_rerun_retries_only_failures(
    checkpoint_factory, tmp_path, monkeypatch
):
    monkeypatch.setattr(openai_compat.time, "sleep", lambda seconds: None)
    monkeypatch.setenv("FAULT_TEST_KEY", SECRET)
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    mode = {"healthy": False}

    def responder(request):
        return explainer_reply(request, echo=f"(key {SECRET})") if mode["healthy"] else error(500)

    methods = [SciTXMethod(m=2), KnownCauseMethod()]  # only SciTX asks the explainer
    with LoopbackOpenAIServer(responder) as server:

        def explainer():
            return OpenAICompatibleBackend(server.base_url, "tiny", api_key_env="FAULT_TEST_KEY", max_retries=1)

        broken = nemo_eval(BENCH, [ckpt], methods, explainer(), editor=KEYWORD_EDITS, out_dir=str(tmp_path / "out"))
        assert broken.failed == 3 and broken.failed_per_method == {"SciTX": 3}
        assert broken.cell("SciTX", "model_r").failed == 3 and broken.cell("KnownCause", "model_r").n == 3
        records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
        assert all("HTTP 500 after 1 retries" in r["reason"] for r in records if r["failed"])

        mode["healthy"] = True
        rerun = nemo_eval(BENCH, [ckpt], methods, explainer(), editor=KEYWORD_EDITS, out_dir=str(tmp_path / "out"))
        # only the failed samples (KnownCause and the Constant row built from it are kept)
        assert rerun.computed == 3 and rerun.resumed == 6 and rerun.failed == 0
        clean = nemo_eval(BENCH, [ckpt], methods, explainer(), editor=KEYWORD_EDITS, out_dir=str(tmp_path / "clean"))
    assert rerun.cells == clean.cells  # the table equals an uninterrupted run's
    explanations = [r["explanation"] for r in map(json.loads, (tmp_path / "out" / "results.jsonl").open())]
    assert any("<redacted>" in text for text in explanations)
    for path in tmp_path.rglob("*"):  # results, reply cache: the echoed key is nowhere on disk
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes()


def test_retrained_checkpoint_changed_setting_and_damaged_results(checkpoint_factory, tmp_path, caplog):
    ckpt = tmp_path / "model_r" / "best.ckpt"
    out = str(tmp_path / "out")
    methods = [SciTXMethod(k=8), KnownCauseMethod()]
    checkpoint_factory(ckpt, seed=0)
    first = nemo_eval(BENCH, [str(ckpt)], methods, out_dir=out)
    assert first.computed == 9  # SciTX, KnownCause and the Constant row (the most frequent KnownCause sentence)

    checkpoint_factory(ckpt, seed=1)  # retrained at the same path
    retrained = nemo_eval(BENCH, [str(ckpt)], methods, out_dir=out)
    assert retrained.resumed == 0 and retrained.recomputed_because.get("target.sha256", 0) >= 1
    fresh = nemo_eval(BENCH, [str(ckpt)], methods, out_dir=str(tmp_path / "fresh"))
    assert retrained.cells == fresh.cells

    changed = nemo_eval(BENCH, [str(ckpt)], [SciTXMethod(k=4), KnownCauseMethod()], out_dir=out)
    assert changed.computed == 3 and changed.resumed == 6  # SciTX recomputed, KnownCause and Constant kept
    assert changed.recomputed_because == {"method.k": 3}

    results = Path(out) / "results.jsonl"
    with results.open("ab") as f:
        f.write(b"\xff\xfe\nnull\n{}\n" + b'{"key": "model_r|SciTX|cmnist-0')  # damage, and a torn tail
    again = nemo_eval(BENCH, [str(ckpt)], [SciTXMethod(k=4), KnownCauseMethod()], out_dir=out)
    assert again.computed == 0 and again.cells == changed.cells
    assert "skipped 3 unreadable line(s)" in caplog.text and "cut a torn last line" in caplog.text


def test_second_run_on_the_same_out_dir_exits_naming_the_holder(checkpoint_factory, tmp_path, capsys):
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    out = tmp_path / "out"
    code = "import sys, time; from nemo_train.store import RunLock; RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(out)], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        err = one_line_error(capsys, ["nemo-eval", "--targets", f"[{ckpt}]", "--out_dir", str(out)])
        assert f"pid {holder.pid}" in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not (out / "results.jsonl").exists()  # the second run did no work


def test_damaged_checkpoint_out_dir_file_and_class_mismatch_are_one_line(checkpoint_factory, tmp_path, capsys):
    damaged = tmp_path / "broken" / "best.ckpt"
    damaged.parent.mkdir()
    damaged.write_bytes(b"PK\x03\x04 not really a zip archive" * 10)
    err = one_line_error(capsys, ["nemo-eval", "--targets", f"[{damaged}]", "--out_dir", str(tmp_path / "o1")])
    assert str(damaged) in err and "cannot be read" in err

    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    (tmp_path / "file").write_text("x")
    err = one_line_error(capsys, ["nemo-eval", "--targets", f"[{ckpt}]", "--out_dir", str(tmp_path / "file")])
    assert "is a file" in err

    five = checkpoint_factory(tmp_path / "five_classes" / "best.ckpt", seed=0, num_classes=5)
    err = one_line_error(capsys, ["nemo-eval", "--targets", f"[{five}]", "--out_dir", str(tmp_path / "o2")])
    assert "5 classes" in err and "has 10" in err
