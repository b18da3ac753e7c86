"""What a finished explanation run logs to W&B, drawn from its stored folder (a run folder built by hand)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import wandb
from PIL import Image
from report_folders import nemo_eval_folder, write_records

from nemo_train.loggers import inline_images, log_report
from nemo_train.reports import write_report
from nemo_train.reports.folder import RunFolder
from nemo_train.reports.wandb_run import log_explanations
from nemo_train.scoring.judges import GroundedJudge


class FakeRun:
    """A W&B run that keeps what it is given."""

    id = "abc123"

    def __init__(self) -> None:
        self.logged, self.summary, self.artifacts = {}, {}, []

    def log(self, data):
        self.logged.update(data)

    def log_artifact(self, artifact):
        self.artifacts.append(artifact)


def test_the_errors_table_has_images_from_the_run_folder_reasons_consistency_and_verdicts(tmp_path):
    run = tmp_path / "run"
    records = nemo_eval_folder(run)
    grounded = GroundedJudge().name
    for r in records:  # as the evaluation stores them: the panel's scores and reasons by judge name
        r["judges"] = {grounded: r["judges"]["grounded"]}
        r["judge_reasons"] = {grounded: f"names {r['blamed'][0]}"}
    write_records(run, records)
    fake = FakeRun()
    log_explanations(fake, RunFolder(run))

    table = fake.logged["results/errors"]
    columns = table.columns
    assert "rule_match [grounded-judge (attribute parser, not a model)]" in columns  # a rule, said so
    rows = {(row[columns.index("method")], row[columns.index("error")]): row for row in table.data}
    assert len(rows) == len(records) == 6
    inconsistent = rows[("Distractor", "e1")]
    assert inconsistent[columns.index("consistent")] is False
    assert inconsistent[columns.index("verdict")] == "inconsistent"
    assert inconsistent[columns.index("reason")] == "names rotation"
    assert rows[("KnownCause", "e0")][columns.index("verdict")] == "match"
    picture = rows[("KnownCause", "e0")][columns.index("image")]
    assert isinstance(picture, wandb.Image) and Path(picture._path).resolve().is_relative_to(run.resolve())
    assert Image.open(picture._path).convert("RGB").getpixel((0, 0)) == (255, 0, 0)  # the stored PNG's colour

    summary = fake.logged["results/summary"]
    assert summary.columns[:4] == ["method", "target", "errors", "rule_match"]
    assert fake.summary["results/KnownCause|model_a/cei"] == pytest.approx(70.0 / 3)
    assert fake.summary["results/KnownCause|model_a/cei_ci_low"] <= 70.0 / 3
    assert fake.summary["results/KnownCause|model_a/cei_ci_high"] >= 70.0 / 3
    assert "results/Distractor|model_a/consistent" in fake.summary


def test_the_report_page_is_attached_with_its_images_inlined(tmp_path):
    run = tmp_path / "run"
    nemo_eval_folder(run)
    page = write_report(run)
    fake = FakeRun()
    log_report(fake, page)
    html = fake.logged["report"]
    assert isinstance(html, wandb.Html) and "data:image/png;base64," in html.html
    assert 'src="images/' not in html.html  # every image of the page travels inside it
    ((artifact,),) = [fake.artifacts]
    assert artifact.type == "report" and "index.html" in artifact.manifest.entries


def test_only_files_of_the_report_folder_are_inlined(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "secret.png").write_bytes(b"not for the page")
    page = '<img src="../secret.png" alt="x">'
    assert inline_images(page, tmp_path / "report") == page


def test_wandb_stages_under_the_run_folder_unless_the_user_chose_a_folder(tmp_path, monkeypatch):
    from nemo_train.loggers import WandbLogger, stage_under

    monkeypatch.delenv("WANDB_DATA_DIR", raising=False)
    monkeypatch.delenv("WANDB_CACHE_DIR", raising=False)
    WandbLogger(save_dir=str(tmp_path / "fit"), mode="offline")  # a Lightning run's logger (no run started yet)
    assert os.environ["WANDB_DATA_DIR"] == str((tmp_path / "fit" / "wandb" / "data").resolve())
    stage_under(tmp_path / "next")  # the next run of the process moves it along
    assert os.environ["WANDB_CACHE_DIR"] == str((tmp_path / "next" / "wandb" / "cache").resolve())
    monkeypatch.setenv("WANDB_DATA_DIR", "/srv/wandb-data")  # the user's own choice stays
    stage_under(tmp_path / "third")
    assert os.environ["WANDB_DATA_DIR"] == "/srv/wandb-data"
