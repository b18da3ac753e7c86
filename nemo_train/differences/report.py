"""The typed result of a model-differences run, its Table 1 / Table 3 print-out and its W&B log."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.console import print_table
from nemo_train.differences.failures import failure_lines
from nemo_train.differences.metrics import THRESHOLDS, Attribution, effective_token_ratio
from nemo_train.metrics.bootstrap import format_with_interval
from nemo_train.secrets import scrub_secrets
from nemo_train.store import write_bytes_atomic

METHOD_NAMES = {
    "human": "Human",
    "raw_differences": "Raw Differences",
    "summarization": "Summarization",
    "optimization": "Optimization",
}


@dataclass
class MethodScore:
    """One row of the table: the method's explanation and its scores on the held-out test conditions."""

    method: str
    completeness: float
    density: float
    token_length: int
    conditions: int
    explanation: str
    token_classes: dict[str, int] | None = None
    ratio_auc: float | None = None
    #: bootstrap 95 % intervals over the test conditions (``None``: not computed)
    completeness_ci_low: float | None = None
    completeness_ci_high: float | None = None
    density_ci_low: float | None = None
    density_ci_high: float | None = None


@dataclass
class DifferencesResult:
    """Headline numbers and records of a run (what :func:`differences` returns)."""

    rows: list[MethodScore]
    evaluator: str
    summarizer: str
    explorer: str
    test_conditions: int
    history: list[dict[str, Any]] = field(default_factory=list)
    explored: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    llm: dict[str, dict[str, int]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    #: methods not scored because a language-model part failed: method -> {"part", "reason"}
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the parts with failed requests: role -> {"label", "requests", "failed", "first_error"}
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def headline(self) -> dict[str, dict[str, float]]:
        """``{method: {completeness, density, token_length}}``."""
        return {
            r.method: {"completeness": r.completeness, "density": r.density, "token_length": r.token_length}
            for r in self.rows
        }

    def row(self, method: str) -> MethodScore:
        return next(r for r in self.rows if r.method == method)

    def to_json(self) -> dict[str, Any]:
        return scrub_secrets(asdict(self))

    def save(self, path: Path) -> None:
        """Write the result as JSON, atomically (a kill leaves the old file or the new one)."""
        write_bytes_atomic(path, json.dumps(self.to_json(), indent=2).encode("utf-8"))


def print_result(result: DifferencesResult, title: str) -> None:
    """Print the method | Completeness | Density | Token Length table, naming the stand-ins used."""
    rows = [
        (
            METHOD_NAMES.get(r.method, r.method),
            format_with_interval(r.completeness, r.completeness_ci_low, r.completeness_ci_high, digits=3),
            format_with_interval(r.density, r.density_ci_low, r.density_ci_high, digits=3),
            r.token_length,
            r.conditions,
        )
        for r in result.rows
    ]
    caption = (
        f"evaluator: {result.evaluator}; summariser: {result.summarizer}; explorer: {result.explorer}; "
        f"{result.test_conditions} held-out test conditions [bootstrap 95 % interval over them]"
    )
    print_table(
        ["method", "Completeness", "Density", "Token Length", "conditions seen"], rows, title=title, caption=caption
    )
    if result.rejected:
        print(f"{len(result.rejected)} proposed conditions rejected (see results.json)")
    for line in failure_lines(result.failures, result.failed):
        print(line)


def log_wandb(result: DifferencesResult, attributions: dict[str, Attribution], out_dir: Path, run_name: str) -> None:
    """Results, per-iteration explanations and scores, heat map, attribution and token-ratio plots."""
    import wandb  # heavy; only when logging

    from nemo_train.loggers import init_run
    from nemo_train.secrets import scrub_text

    # the run the command opened (nemo_train.runs: quiet, redacted, no command line); else one like it
    started = wandb.run is None
    run = wandb.run or init_run(out_dir, project="nemo-train", job_type="differences", name=run_name)
    # every score is the evaluator's reading: its label (a stand-in says "not an LLM") goes next to the numbers
    columns = ["method", "completeness", "density", "token_length", "conditions", "explanation", "scored by"]
    table = wandb.Table(columns=columns)
    for r in result.rows:
        table.add_data(
            r.method, r.completeness, r.density, r.token_length, r.conditions, r.explanation, result.evaluator
        )
    iterations = wandb.Table(
        columns=["iteration", "origin", "kept", "completeness", "density", "token_length", "explanation", "scored by"]
    )
    for h in result.history:
        iterations.add_data(
            h["iteration"],
            h["origin"],
            h["kept"],
            h["completeness"],
            h["density"],
            h["token_length"],
            h["explanation"],
            result.evaluator,
        )
    payload: dict[str, Any] = {"differences/results": table, "differences/optimization": iterations}
    for key in ("heatmap", "attribution", "ratio_curve"):
        if key in result.files:
            payload[f"differences/{key}"] = wandb.Image(result.files[key])
    if attributions:
        payload["differences/effective_token_ratio"] = wandb.plot.line_series(
            xs=list(THRESHOLDS),
            ys=[list(effective_token_ratio(a.scores)) for a in attributions.values()],
            keys=list(attributions),
            title="Effective token ratio",
            xname="threshold",
        )
    run.log(payload)
    for part in ("evaluator", "summarizer", "explorer"):  # labels may name an endpoint: through the redaction too
        run.summary[part] = scrub_text(getattr(result, part))
    for r in result.rows:
        run.summary[f"{r.method}/completeness"] = r.completeness
        run.summary[f"{r.method}/density"] = r.density
        run.summary[f"{r.method}/token_length"] = r.token_length
    if started:
        run.finish()
