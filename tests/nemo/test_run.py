"""``nemo-eval``: the embedded default end to end, typed configs, the CLI, kill -9 and resume, the reply cache."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")

import forked_commands  # noqa: E402
from distributed_runs import holding  # noqa: E402
from jsonargparse import ArgumentError, ArgumentParser  # noqa: E402

from nemo_train.cli import main, run_pipeline, summarize_parser_error  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.metrics.bootstrap import mean_interval  # noqa: E402
from nemo_train.models.specs import FitCheckpoint  # noqa: E402
from nemo_train.nemo.components import (  # noqa: E402
    BenchmarkArgs,
    ChangeMLLMMethod,
    DistractorMethod,
    KnownCauseMethod,
    SciTXMethod,
)
from nemo_train.nemo.report import known_cause_win_rate, print_report, summarize  # noqa: E402
from nemo_train.nemo.run import nemo_eval  # noqa: E402
from nemo_train.store import ResultStore  # noqa: E402
from tests.test_configs import preset_runs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = [SciTXMethod(), ChangeMLLMMethod(), KnownCauseMethod(), DistractorMethod()]


@pytest.fixture(scope="module")
def checkpoint(model_a_checkpoint):
    return model_a_checkpoint


def small(n: int = 8) -> BenchmarkArgs:
    return BenchmarkArgs(n=n, test_styles=1)


def test_embedded_default_separates_true_cause_from_distractor(checkpoint, tmp_path, capsys):
    result = nemo_eval(small(20), [checkpoint], METHODS, out_dir=str(tmp_path))
    out = capsys.readouterr().out
    assert "NEMO evaluation on cmnist" in out and "SciTX" in out and "grounded judge" in out
    # offline, the language-model methods run on rules, and the table says so
    assert result.cell("SciTX", "model_a").label == "SciTX (attribute template, not a model)"
    assert "attribute template, not a model" in out
    assert result.cell("KnownCause", "model_a").label == "KnownCause"
    records = list(ResultStore(result.results).records.values())
    rate, count = known_cause_win_rate(records)
    assert count >= 10 and rate >= 0.9  # colour beats rotation on CEI for at least 90 % of the errors
    assert result.known_cause_win_rate == rate
    known, distractor = result.cell("KnownCause", "model_a"), result.cell("Distractor(rotation)", "model_a")
    assert known.llm_match == 1.0 and distractor.llm_match == 0.0  # keyword judge on the colour criterion
    assert known.cei > distractor.cei
    scitx = [r for r in records if r["method"] == "SciTX"]
    assert all(r["cei"] == max(r["candidate_cei"]) for r in scitx if r["candidate_cei"])  # argmax selection
    assert all(r["settings"]["target.sha256"] and r["settings"]["method.class"] for r in records)


def test_two_best_ckpt_targets_get_two_columns(trained_cmnist_classifier, tmp_path, capsys, lightning_checkpoint):
    module, _ = trained_cmnist_classifier
    a = lightning_checkpoint(module, tmp_path / "model_a" / "best.ckpt")
    b = lightning_checkpoint(module, tmp_path / "model_b" / "best.ckpt")
    result = nemo_eval(small(3), [a, b], [KnownCauseMethod()], out_dir=str(tmp_path / "out"))
    assert [c.target for c in result.cells if c.method == "KnownCause"] == ["model_a", "model_b"]
    assert {c.method for c in result.cells} == {"KnownCause", "Constant"}  # what one sentence for all scores
    printed = capsys.readouterr().out
    assert "model_a LLM Match" in printed and "bootstrap 95 % interval" in printed
    stored = json.loads((tmp_path / "out" / "summary.json").read_text())
    cell = result.cell("KnownCause", "model_a")
    (row,) = [c for c in stored["cells"] if c["method"] == "KnownCause" and c["target"] == "model_a"]
    assert (row["cei"], row["cei_ci_low"], row["cei_ci_high"]) == (cell.cei, *cell.intervals["cei"])
    assert row["cei_ci_low"] <= row["cei"] <= row["cei_ci_high"]
    records = [r for r in ResultStore(result.results).records.values() if r["method"] == "KnownCause"]
    assert cell.intervals["cei"] == mean_interval(
        [r["cei"] for r in sorted(records, key=lambda r: r["sample_id"]) if r["target"] == cell.target]
    )  # from the stored records
    named = nemo_eval(
        small(3),
        [FitCheckpoint(a, name="first"), FitCheckpoint(a, name="second")],
        [KnownCauseMethod()],
        out_dir=str(tmp_path / "named"),
    )
    assert [c.target for c in named.cells if c.method == "KnownCause"] == ["first", "second"]
    with pytest.raises(UserInputError, match="more than once"):
        nemo_eval(small(3), [FitCheckpoint(a, name="x"), FitCheckpoint(b, name="x")], [KnownCauseMethod()])


@pytest.mark.fault
def test_kill_minus_nine_then_resume(checkpoint, tmp_path):
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    code = (
        "from nemo_train.nemo.run import nemo_eval; from tests.nemo.test_run import METHODS, small;"
        f"nemo_eval(small(), [{checkpoint!r}], METHODS,"
        f" out_dir={str(killed_dir)!r})"
    )
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    env = holding(env, "results.jsonl", 6)  # it stops after its sixth record, until killed
    proc = forked_commands.start([sys.executable, "-c", code], env, ROOT)  # a process of its own, forked pre-imported
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
    total = 5 * 8  # four methods and the Constant row (the most frequent known-cause sentence for every error)
    assert 6 <= finished < total

    resumed = nemo_eval(small(), [checkpoint], METHODS, out_dir=str(killed_dir))
    assert resumed.resumed == finished  # finished samples are not recomputed
    assert resumed.computed == total - finished
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == len({r["key"] for r in lines}) == total  # nothing written twice

    clean = nemo_eval(small(), [checkpoint], METHODS, out_dir=str(clean_dir))
    assert clean.computed == total and clean.resumed == 0
    assert resumed.cells == clean.cells  # same table as an uninterrupted run
    again = nemo_eval(small(), [checkpoint], METHODS, out_dir=str(killed_dir))
    assert again.computed == 0 and again.cells == clean.cells


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

    monkeypatch.setenv("NEMO_TEST_KEY", "sk-secret-123")
    with LoopbackOpenAIServer(responder) as server:
        config = tmp_path / "eval.yaml"
        config.write_text(
            f"benchmark: {{n: 3, test_styles: 1}}\ntargets: [{checkpoint}]\n"
            "methods: [{class_path: SciTXMethod, init_args: {m: 2}}]\n"
            f"out_dir: {tmp_path / 'out'}\n"
            "explainer:\n  class_path: OpenAICompatibleBackend\n"
            f"  init_args: {{base_url: {server.base_url}, model: tiny, api_key_env: NEMO_TEST_KEY, max_retries: 0}}\n"
        )
        first = run_pipeline("nemo-eval", ["--config", str(config)])
        sent = len(server.requests)
        assert first.computed == 3 and sent > 0
        (tmp_path / "out" / "results.jsonl").unlink()  # lose the results, keep the reply cache
        second = run_pipeline("nemo-eval", ["--config", str(config)])
        assert second.computed == 3 and len(server.requests) == sent  # every reply came from the cache
        assert second.cells == first.cells
    out = capsys.readouterr().out
    assert "sk-secret-123" not in out
    # the endpoint was asked for the hypotheses' JSON schema, so no reply needed a re-ask (printed share)
    assert "JSON replies re-asked (0%)" in out and "explainer calls: " in out
    asked = [r["body"] for r in server.requests if "cause_of_error" in json.dumps(r["body"]["messages"])]
    assert asked and all(b["response_format"]["type"] == "json_schema" for b in asked)
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert b"sk-secret-123" not in path.read_bytes()
    record = next(iter(ResultStore(tmp_path / "out" / "results.jsonl").records.values()))
    assert record["instruction"] == {"attribute": "color", "value": 0}
    assert record["settings"]["explainer.model"] == "tiny"


def parse_error(args: list[str]) -> str:
    """The one-line message the CLI prints for a configuration the parser rejects."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action="config")
    parser.add_function_arguments(nemo_eval)
    with pytest.raises(ArgumentError) as info:
        parser.parse_args(args)
    message = summarize_parser_error(info.value)
    assert "\n" not in message
    return f"{message} {info.value}"


def test_bad_input_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    message = parse_error(["--benchmark.name", "mnist", "--targets", "[x.ckpt]"])
    assert "Got value: mnist" in message and "cmnist" in message
    with pytest.raises(SystemExit) as exit_info:
        main(["nemo-eval", "--targets", "[missing.ckpt]"])
    assert exit_info.value.code == 2
    assert "missing.ckpt" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a run with a bad target wrote to its out_dir"


@pytest.mark.parametrize(
    "config, option",
    [
        ("benchmark: {name: cmnist, nn: 5}\n", "nn"),
        ("methods: [{class_path: SciTXMethod, init_args: {kk: 4}}]\n", "kk"),
        ("editor: {class_path: ExactEdit, init_args: {deriver: magic}}\n", "magic"),
        (
            "explainer: {class_path: OpenAICompatibleBackend, init_args: {base_url: 'http://h/v1', model: m, kind: x}}\n",
            "kind",
        ),
    ],
)
def test_unknown_option_in_a_config_is_one_line(config, option, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(config + "targets: [x.ckpt]\n")
    message = parse_error(["--config", str(path)])
    assert option in message


def test_table_layout(capsys):
    records = [
        {
            "method": "SciTX",
            "target": "vit",
            "sample_id": "a",
            "cei": 10.0,
            "llm_match": 1.0,
            "explanation": "e",
            "judges": {"j": 1.0},
        },
        {
            "method": "SciTX",
            "target": "vit",
            "sample_id": "b",
            "cei": 20.0,
            "llm_match": 0.5,
            "explanation": "e",
            "judges": {"j": 0.5},
        },
        {
            "method": "CamMLLM",
            "target": "vit",
            "sample_id": "a",
            "cei": -2.0,
            "llm_match": 0.0,
            "explanation": "e",
            "judges": {"j": 0.0},
        },
        {
            "method": "CamMLLM",
            "target": "vit",
            "sample_id": "b",
            "failed": True,
            "cei": None,
            "llm_match": None,
            "judges": {},
        },
    ]
    records.append({**records[0], "sample_id": "c", "explanation": " ", "cei": 0.0, "llm_match": 0.0})
    cells = summarize(records)
    assert cells[0].n == 3 and cells[0].empty == 1 and cells[0].cei == 10.0
    records.pop()
    cells = summarize(records)
    assert cells[0].llm_match == 0.75 and cells[0].cei == 15.0 and cells[0].n == 2
    assert cells[1].n == 1 and cells[1].failed == 1 and cells[1].cei == -2.0
    table = print_report(cells, "toy")
    assert "0.750" in table and "15.0" in table and "-2.0" in table and "failed" in table and "empty" not in table
    assert math.isnan(summarize([{**records[3], "method": "X"}])[0].cei)


#: Every nemo-eval preset, as the files its usage comment loads together (a shared recipe, then a benchmark).
NEMO_PRESETS = [configs for command, configs in preset_runs() if command == "nemo-eval"]


@pytest.mark.parametrize("configs", NEMO_PRESETS, ids="+".join)
def test_nemo_configs_parse(configs):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(nemo_eval)
    parser.add_argument("--config", action="config")
    config = parser.parse_args([arg for path in configs for arg in ("--config", str(ROOT / path))])
    assert config.targets and config.benchmark.name
    assert not any("kind:" in (ROOT / path).read_text() for path in configs)
    for spec in [config.explainer, *(config.judges or [])]:
        if spec:
            assert "api_key" not in str(spec.init_args).replace("api_key_env", "")  # keys only via api_key_env
    init = parser.instantiate(config)
    assert all(hasattr(m, "build") for m in init.methods)
