"""``nemo-eval``: the embedded default end to end, the CLI, kill -9 and resume, the LLM reply cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.cli import PIPELINE_COMMANDS, main, run_pipeline  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.nemo.run import ResultStore, format_table, known_cause_win_rate, nemo_eval, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["scitx", "change_mllm", "known_cause", "distractor"]


@pytest.fixture(scope="module")
def checkpoint(trained_cmnist_classifier, tmp_path_factory):
    """The session's trained CMNIST Model-A classifier as a Lightning checkpoint file."""
    import lightning
    import torch

    module, _ = trained_cmnist_classifier
    path = tmp_path_factory.mktemp("ckpt") / "model_a.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
        },
        path,
    )
    return str(path)


def test_embedded_default_separates_true_cause_from_distractor(checkpoint, tmp_path, capsys):
    result = nemo_eval(targets=[checkpoint], methods=METHODS, n=20, seed=0, out_dir=str(tmp_path), test_styles=1)
    out = capsys.readouterr().out
    assert "NEMO evaluation on cmnist" in out and "SciTX" in out and "keyword judge" in out
    records = list(ResultStore(result["results"]).records.values())
    rate, count = known_cause_win_rate(records)
    assert count >= 10
    assert rate >= 0.9  # colour beats rotation on CEI for at least 90 % of the errors
    summary = summarize(records)
    known, distractor = summary[("KnownCause", "model_a")], summary[("Distractor(rotation)", "model_a")]
    assert known["llm_match"] == 1.0 and distractor["llm_match"] == 0.0  # keyword judge on the colour criterion
    assert known["cei"] > distractor["cei"]
    scitx = [r for r in records if r["method"] == "SciTX"]
    assert all(r["cei"] == max(r["candidate_cei"]) for r in scitx if r["candidate_cei"])  # argmax selection


def test_kill_minus_nine_then_resume(checkpoint, tmp_path):
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    args = dict(targets=[checkpoint], methods=METHODS, n=8, seed=0, test_styles=1)
    code = f"from nemo_train.nemo.run import nemo_eval; nemo_eval(out_dir={str(killed_dir)!r}, **{args!r})"
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    results = killed_dir / "results.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 6:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(ResultStore(results).records)
    assert 6 <= finished < 4 * 8

    resumed = nemo_eval(out_dir=str(killed_dir), **args)
    assert resumed["resumed"] == finished  # finished samples are not recomputed
    assert resumed["computed"] == 4 * 8 - finished
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == len({r["key"] for r in lines}) == 4 * 8  # nothing written twice

    clean = nemo_eval(out_dir=str(clean_dir), **args)
    assert clean["computed"] == 4 * 8 and clean["resumed"] == 0
    assert resumed["summary"] == clean["summary"]  # same table as an uninterrupted run
    again = nemo_eval(out_dir=str(killed_dir), **args)
    assert again["computed"] == 0 and again["summary"] == clean["summary"]


def test_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"key": "a|m|1", "x": 1}) + "\n" + '{"key": "a|m|2", "x"')
    store = ResultStore(path)
    assert list(store.records) == ["a|m|1"]
    store.append({"key": "a|m|3"})
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a|m|1", "a|m|3"]


def test_cli_with_config_file_and_llm_cache(checkpoint, tmp_path, monkeypatch, capsys):
    """Through the CLI with --config; an explainer endpoint on loopback; a rerun pays no call twice."""
    from loopback_openai_server import LoopbackOpenAIServer, completion

    def responder(request):
        text = request["body"]["messages"][-1]["content"]
        text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text)
        if "Pick the ONE attribute" in text:
            return completion('{"attribute": "color", "value": "red"}')
        n = request["body"].get("n", 1)
        return completion(*['{"cause_of_error": "The stroke colour is unusual; in training this digit was red."}'] * n)

    monkeypatch.setitem(PIPELINE_COMMANDS, "nemo-eval", "nemo_train.nemo.run:nemo_eval")
    monkeypatch.setenv("NEMO_TEST_KEY", "sk-secret-123")
    with LoopbackOpenAIServer(responder) as server:
        config = tmp_path / "eval.yaml"
        config.write_text(
            f"benchmark: cmnist\ntargets: [{checkpoint}]\nmethods: [scitx]\nn: 3\nm: 2\ntest_styles: 1\nout_dir: {tmp_path / 'out'}\n"
            f"explainer: {{kind: openai, base_url: {server.base_url}, model: tiny, api_key_env: NEMO_TEST_KEY, max_retries: 0}}\n"
        )
        first = run_pipeline("nemo-eval", ["--config", str(config)])
        sent = len(server.requests)
        assert first["computed"] == 3 and sent > 0
        (tmp_path / "out" / "results.jsonl").unlink()  # lose the results, keep the reply cache
        second = run_pipeline("nemo-eval", ["--config", str(config)])
        assert second["computed"] == 3 and len(server.requests) == sent  # every reply came from the cache
        assert second["summary"] == first["summary"]
    out = capsys.readouterr().out
    assert "sk-secret-123" not in out
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert b"sk-secret-123" not in path.read_bytes()
    record = next(iter(ResultStore(tmp_path / "out" / "results.jsonl").records.values()))
    assert record["instruction"] == {"attribute": "color", "value": 0}


def test_bad_input_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(PIPELINE_COMMANDS, "nemo-eval", "nemo_train.nemo.run:nemo_eval")
    with pytest.raises(UserInputError, match="unknown benchmark 'mnist'"):
        nemo_eval(benchmark="mnist", targets=["x.ckpt"])
    with pytest.raises(SystemExit) as exit_info:
        main(["nemo-eval", "--targets", "[missing.ckpt]"])
    assert exit_info.value.code == 2
    assert "missing.ckpt" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a run with a bad target wrote to its out_dir"


def test_table_layout():
    records = [
        {"method": "SciTX", "target": "vit", "sample_id": "a", "cei": 10.0, "llm_match": 1.0, "judges": {"j": 1.0}},
        {"method": "SciTX", "target": "vit", "sample_id": "b", "cei": 20.0, "llm_match": 0.5, "judges": {"j": 0.5}},
        {"method": "CamMLLM", "target": "vit", "sample_id": "a", "cei": -2.0, "llm_match": 0.0, "judges": {"j": 0.0}},
    ]
    summary = summarize(records)
    assert summary[("SciTX", "vit")]["llm_match"] == 0.75 and summary[("SciTX", "vit")]["cei"] == 15.0
    table = format_table(summary, "toy")
    assert "0.750" in table and "15.00" in table and "-2.00" in table


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "nemo").glob("*.yaml")), ids=lambda p: p.name)
def test_nemo_configs_parse(path):
    from jsonargparse import ArgumentParser

    from nemo_train.nemo.run import BENCHMARKS, METHODS

    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(nemo_eval)
    config = parser.parse_path(str(path))
    assert config.benchmark in BENCHMARKS and config.targets
    assert set(config.methods) <= set(METHODS)
    for spec in [config.explainer, *(config.judges or [])]:
        if spec:
            assert spec["kind"] in ("openai", "hf_local") and "api_key" not in spec  # keys only via api_key_env


def test_wandb_table_per_sample(checkpoint, tmp_path, monkeypatch):
    import wandb

    logged = []
    fake_run = type("FakeRun", (), {"log": lambda self, data: logged.append(data)})()
    monkeypatch.setattr(wandb, "run", None)
    monkeypatch.setattr(wandb, "init", lambda **kwargs: fake_run)
    nemo_eval(targets=[checkpoint], methods=["known_cause"], n=3, test_styles=1, out_dir=str(tmp_path), wandb=True)
    ((data,),) = [logged]
    table, samples = data["nemo/cmnist/table"], data["nemo/cmnist/samples"]
    assert table.data[0][:2] == ["KnownCause", "model_a"]
    assert len(samples.data) == 3 and samples.columns[:8] == [
        "image",
        "y",
        "y_hat",
        "method",
        "target",
        "explanation",
        "edit",
        "edited image",
    ]
    assert all(row[0] is not None and row[7] is not None for row in samples.data)  # original and edited image
