"""The end of a run: every command with results writes its report page through the run floor (one hook), its W&B
run gets the tables, scalar summaries and page; a run that did not finish is marked partial whatever its command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_folders import nemo_eval_folder, provenance

from nemo_train import runs
from nemo_train.reports import write_report
from nemo_train.reports.folder import RunFolder
from nemo_train.runs import REPORTED_COMMANDS, RunArgs, open_run
from nemo_train.store import RunLock


def finished_provenance(folder: Path, command: str, finished: str | None) -> None:
    provenance(folder, command)
    record = json.loads((folder / "provenance.json").read_text())
    (folder / "provenance.json").write_text(json.dumps({**record, "finished": finished}))


def test_a_killed_run_of_any_command_is_marked_partial_and_a_finished_one_is_not(tmp_path):
    killed = tmp_path / "killed"
    finished_provenance(killed, "differences", None)  # as the run floor leaves it until the run ends
    (killed / RunLock.FILE_NAME).write_text("12345")  # the lock file a killed run leaves (nobody holds it)
    (killed / "table.txt").write_text("method  score\nTopK    0.5\n")
    text = write_report(killed).read_text()
    assert 'id="partial"' in text and "the run stopped before it finished" in text and "TopK" in text

    done = tmp_path / "done"
    finished_provenance(done, "differences", "2026-01-01T00:10:00+00:00")
    (done / "table.txt").write_text("method  score\nTopK    0.5\n")
    assert 'id="partial"' not in write_report(done).read_text()


def test_a_killed_explanation_run_keeps_its_own_partial_reason(tmp_path):
    run = tmp_path / "run"
    nemo_eval_folder(run, summary=False, torn_tail=True)  # a results.jsonl cut in the middle of a line
    record = json.loads((run / "provenance.json").read_text())
    (run / "provenance.json").write_text(json.dumps({**record, "finished": None}))
    text = write_report(run).read_text()
    assert 'id="partial"' in text and "stopped before writing summary.json" in text


def test_the_run_writing_its_own_page_is_not_partial(tmp_path):
    """While the run holds its folder's lock (the page written at its end) its page is not marked partial."""
    with open_run("explain", RunArgs(out_dir=str(tmp_path / "run"))) as run:
        assert json.loads((run.out_dir / "provenance.json").read_text())["finished"] is None
        (run.out_dir / "table.txt").write_text("done\n")
        assert RunFolder(run.out_dir).state == "running here"
    assert RunFolder(run.out_dir).state == "finished"  # the run floor recorded the end
    assert (run.out_dir / "report" / "index.html").is_file()  # and wrote the page
    assert "explain" in REPORTED_COMMANDS


def test_a_failed_run_writes_no_page_and_stays_unfinished(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), open_run("lbee", RunArgs(out_dir=str(out))):
        (out / "partial.txt").write_text("half\n")
        raise RuntimeError("stopped")
    assert not (out / "report").exists() and RunFolder(out).state == "stopped"


def test_a_command_without_results_gets_no_page(tmp_path):
    with open_run("zoo", RunArgs(out_dir=str(tmp_path / "run"))) as run:
        pass
    assert not (run.out_dir / "report").exists() and RunFolder(run.out_dir).state == "finished"


@pytest.mark.slow
def test_nemo_eval_ends_with_its_page_and_its_wandb_tables_in_the_run_folder(
    model_a_checkpoint, tmp_path, monkeypatch, capsys
):
    """A real (small) ``nemo-eval`` with W&B offline, output to a log: progress lines, the page's path printed at
    the end, and in its W&B run the errors table (real images, the judges' reason, consistency), the means with
    their intervals as scalars and the page, all under ``out_dir``."""
    from PIL import Image

    from nemo_train.nemo.components import BenchmarkArgs, DistractorMethod, KnownCauseMethod
    from nemo_train.nemo.run import nemo_eval

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    methods = [KnownCauseMethod(), DistractorMethod()]
    summary = {}
    finish = runs._finish_wandb

    def keep_summary(run):  # the run's summary as it is synced (offline it is stored in a binary log)
        if run is not None and run.wandb_run is not None:
            summary.update({key: run.wandb_run.summary[key] for key in run.wandb_run.summary.keys()})
        finish(run)

    monkeypatch.setattr(runs, "_finish_wandb", keep_summary)
    nemo_eval(BenchmarkArgs(n=3, test_styles=1), [model_a_checkpoint], methods, out_dir=str(out), wandb=True)
    printed = capsys.readouterr()

    page = out / "report" / "index.html"
    assert f"report: {page}" in printed.out.splitlines()
    assert "\r" not in printed.err
    progress = [line for line in printed.err.splitlines() if line.startswith("nemo-eval model_a:")]
    assert progress and progress[-1].startswith("nemo-eval model_a: 100%"), printed.err
    assert 'id="partial"' not in page.read_text() and RunFolder(out).state == "finished"

    # W&B stages a logged table and its images for the upload (wandb sync); here under the run folder
    staged = [p for p in (out / "wandb" / "data").rglob("*") if p.is_file()]
    tables = [json.loads(p.read_text()) for p in staged if p.read_bytes()[:1] == b"{"]
    table = next(t for t in tables if t.get("_type") == "table" and "reason" in t["columns"])
    columns = table["columns"]
    assert {"reason", "consistent", "verdict", "cause", "error"} <= set(columns)
    assert any(c.startswith("rule_match") for c in columns)  # the judge is a rule, and the column says so
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["judge_reasons"] for r in records if not r["failed"])
    assert len(table["data"]) == len(records)
    by_key = {(r["method"], r["sample_id"]): r for r in records}
    for row in table["data"]:
        stored = by_key[(row[columns.index("method")], row[columns.index("error")])]
        assert row[columns.index("reason")] and row[columns.index("consistent")] == stored["consistent"]
    pictures = {tuple(Image.open(p).convert("RGB").getdata()) for p in staged if p.read_bytes()[:4] == b"\x89PNG"}
    for r in records:  # every error image, in its real colours
        assert tuple(Image.open(out / r["image_file"]).convert("RGB").getdata()) in pictures
    for key in ("cei", "cei_ci_low", "cei_ci_high", "rule_match", "rule_match_ci_low"):
        assert isinstance(summary[f"results/KnownCause|model_a/{key}"], (int, float))  # JSON reads 1.0 back as 1
    assert summary["report"]["_type"] == "html-file"
    assert {p.name for p in tmp_path.iterdir()} == {"run"}  # nothing in the working folder or W&B's default one
    assert Path(os.environ["WANDB_DATA_DIR"]).is_relative_to(out)


def test_a_run_still_going_in_another_process_is_marked_as_such(tmp_path):
    run = tmp_path / "run"
    finished_provenance(run, "lbee", None)
    (run / "table.txt").write_text("so far\n")
    holder = (  # another process holding the run's lock, as a running command does
        "import fcntl, os, sys\n"
        f"fd = os.open({str(run / RunLock.FILE_NAME)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert RunFolder(run).state == "running"
        assert "the run is still going" in write_report(run).read_text()
    finally:
        proc.communicate("")
    assert RunFolder(run).state == "stopped"
