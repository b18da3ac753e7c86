"""A run's stored results in its W&B run, logged when the run ends (with its report page): the same content as the
page for users who track there.

* ``nemo-eval`` / ``distill-eval``: ``results/errors``, a Table with one row per explanation (the error's image and
  the edited one in their real colours, read from the PNG files the run stored under ``out_dir``; true and predicted
  class, cause, explanation, named factor, edit, CEI, the judges' scores and reasons, grounding, consistency and the
  verdict, so the W&B table filters as the page's gallery does), ``results/summary`` (a Table per method and target
  with each mean and its bootstrap 95 % interval) and the same means and bounds as scalars in the run's summary
  (``<method>|<target>/<metric>``, ``..._ci_low``, ``..._ci_high``);
* every command with a page: the page itself (:func:`nemo_train.loggers.log_report`).

Everything comes from the stored files (nothing is re-run); images are logged from files under ``out_dir``, so
the run folder holds every image before ``wandb sync``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import wandb

from nemo_train.loggers import log_report, log_summary
from nemo_train.nemo.report import summarize
from nemo_train.reports.explanations import METRICS, stored_cells
from nemo_train.reports.folder import RunFolder, read_records
from nemo_train.reports.gallery import cause_of, class_text, edit_text, named_factor, reasons_text, verdict
from nemo_train.scoring.labels import match_key, match_label

#: The commands whose records become W&B tables.
EXPLANATION_COMMANDS = ("nemo-eval", "distill-eval")
ERROR_COLUMNS = [
    "image",
    "y",
    "y_hat",
    "method",
    "target",
    "error",
    "cause",
    "explanation",
    "named factor",
    "edit",
    "edited image",
    "cei",
    "judge score",  # named by match_label: says when the judges are rules, not models
    "reason",
    "grounding",
    "consistent",
    "verdict",
]


def _image(folder: RunFolder, relative: str | None) -> wandb.Image | None:
    """The stored PNG ``relative`` (a file of the run folder) as a W&B image, or ``None``."""
    if not relative or Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    path = folder.path / relative
    return wandb.Image(str(path)) if path.is_file() else None


def error_rows(folder: RunFolder, records: list[dict[str, Any]]) -> list[list[Any]]:
    """One row of :data:`ERROR_COLUMNS` per stored record."""
    rows = []
    for r in records:
        rows.append(
            [
                _image(folder, r.get("image_file")),
                class_text(r, "label"),
                class_text(r, "prediction"),
                r.get("method"),
                r.get("target"),
                r.get("sample_id"),
                cause_of(r),
                r.get("explanation"),
                named_factor(r),
                edit_text(r.get("edit", r.get("instruction"))),
                _image(folder, r.get("edited_image_file")),
                r.get("cei"),
                r.get("llm_match"),
                reasons_text(r),
                r.get("grounding"),
                r.get("consistent"),
                verdict(r),
            ]
        )
    return rows


def summary_rows(records: list[dict[str, Any]], stored: dict | None) -> list[dict[str, Any]]:
    """Per (method, target): ``name`` (``method|target``), the errors, each mean with its interval bounds, and the
    consistent share; the stored table's numbers where the run wrote one."""
    rows = []
    for cell in summarize(records):
        scores = {**cell.to_json(), **(stored or {}).get((cell.method, cell.target), {})}
        rows.append({**scores, "name": f"{cell.method}|{cell.target}"})
    return rows


def log_explanations(wandb_run: Any, folder: RunFolder) -> None:
    """The tables and scalar summaries of an explanation run (see the module); the judge score's column is named
    ``rule_match [...]`` when no judge is a language model (:func:`~nemo_train.scoring.labels.match_label`)."""
    records, _ = read_records(folder.path / "results.jsonl")
    if not records:
        return
    judges = sorted({j for r in records for j in r.get("judges") or {}})
    match = match_key(judges)
    errors = [match_label(judges) if c == "judge score" else c for c in ERROR_COLUMNS]
    rows = [{**row, match: row.get("llm_match")} for row in summary_rows(records, stored_cells(folder))]
    for row in rows:
        row.update({f"{match}{s}": row.get(f"llm_match{s}") for s in ("_ci_low", "_ci_high")})
    keys = tuple(match if metric == "llm_match" else metric for metric, _ in METRICS)
    columns = [f"{m}{s}" for m in keys for s in ("", "_ci_low", "_ci_high")]
    summary = wandb.Table(columns=["method", "target", "errors", *columns, "consistent", "failed"])
    for row in rows:
        summary.add_data(
            row["method"], row["target"], row.get("n"), *[row.get(c) for c in columns], row.get("consistent"),
            row.get("failed"),
        )  # fmt: skip
    wandb_run.log({"results/errors": wandb.Table(columns=errors, data=error_rows(folder, records))})
    wandb_run.log({"results/summary": summary})
    log_summary(wandb_run, "results", rows, (*keys, "consistent"))


def log_run(wandb_run: Any, run_dir: str | Path, page: str | Path) -> None:
    """Log a finished run's stored results (explanation runs) and its report ``page`` to ``wandb_run``."""
    folder = RunFolder(Path(run_dir))
    if folder.command in EXPLANATION_COMMANDS:
        log_explanations(wandb_run, folder)
    log_report(wandb_run, page)
