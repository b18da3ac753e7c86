"""``nemo-train judge``: grade a file of explanations with a judge panel and measure it against hand labels.

Each line of the items file is a JSON object: ``text`` (the explanation), ``true_class``, ``predicted_class``,
``attributes`` (the image's attribute values, as value names or as the benchmark stores them: indices of named
values), ``cause`` (the factor that caused this error) and optionally ``label`` (the correct score, 1 / 0.5 / 0
by the rubric of docs/GRADING.md), ``group``, ``split`` (agreement is also reported per split, e.g. the
shipped set's ``held_out`` items) and ``benchmark`` (the row's fact sheet; default ``--benchmark``).
Without ``--items`` the labelled set shipped with the package is graded (:data:`SHIPPED_LABELS`).

Under ``out_dir``: ``scores.jsonl`` (one row per item, in input order: ``score`` — the panel mean —, each
judge's score, reason and grounding) and, where labels exist, ``agreement.json``: per judge, overall and per
group, the accuracy (exact agreement with the label) and Cohen's kappa on the three levels
(``sklearn.metrics.cohen_kappa_score``), each with a bootstrap 95 % interval over items
(``scipy.stats.bootstrap``, seeded); with two or more judges, the kappa of every pair of judges as well.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from datamodules.facts import DatasetFacts
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.metrics.bootstrap import format_with_interval, mean_interval
from nemo_train.runs import OutDir, run_command
from nemo_train.scoring.benchmark import FACT_SHEETS
from nemo_train.scoring.criteria import SCORES
from nemo_train.scoring.judges import GroundedJudge, Judge, JudgeItem, JudgePanel, LLMJudge
from nemo_train.store import write_json_atomic

__all__ = ["SHIPPED_LABELS", "agreement", "judge", "kappa", "read_items"]

#: The labelled set written for measuring judges (docs/GRADING.md; made by ``scripts/make_judge_labels.py``).
SHIPPED_LABELS = Path(__file__).with_name("data") / "judge_labels.jsonl"
BenchmarkName = Literal["shifts", "cmnist", "clevr"]
_RESAMPLES = 2000
_REQUIRED = ("text", "true_class", "predicted_class", "attributes", "cause")


def read_items(path: str | Path, benchmark: str | None) -> list[dict[str, Any]]:
    """The rows of a JSONL items file, checked (one-line :class:`UserInputError` naming the line on bad input)."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"items file {str(path)!r} does not exist")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path}:{number}: not a JSON object ({err.msg})") from None
        if not isinstance(row, dict):
            raise UserInputError(f"{path}:{number}: not a JSON object")
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise UserInputError(
                f"{path}:{number}: missing {', '.join(missing)}; each item needs {', '.join(_REQUIRED)}"
            )
        row.setdefault("benchmark", benchmark)
        if row["benchmark"] not in FACT_SHEETS:
            raise UserInputError(
                f"{path}:{number}: unknown benchmark {row['benchmark']!r}; expected one of {sorted(FACT_SHEETS)}"
            )
        if row.get("label") is not None and row["label"] not in SCORES:
            raise UserInputError(f"{path}:{number}: label {row['label']!r} is not 1, 0.5 or 0")
        if not isinstance(row["attributes"], dict):
            raise UserInputError(f"{path}:{number}: attributes must be an object of attribute values")
        rows.append(row)
    if not rows:
        raise UserInputError(f"items file {str(path)!r} holds no items")
    return rows


def _attributes(row: dict[str, Any], facts: DatasetFacts) -> dict[str, str]:
    """The row's attributes as text: value names kept, stored indices of named values turned into names."""
    attributes = {str(k): str(v) for k, v in row["attributes"].items()}
    stored = {k: v for k, v in row["attributes"].items() if not isinstance(v, str)}
    return attributes | facts.value_names(stored)


def _panel(judges: Sequence[Judge], benchmark: str) -> JudgePanel:
    """The configured judges, each copied and set to ``benchmark``'s criterion and fact sheet."""
    copies = []
    for original in judges:
        judge = copy.copy(original)  # an LLM judge's copy shares its backend (and cache)
        judge.for_benchmark(benchmark, FACT_SHEETS[benchmark])
        copies.append(judge)
    return JudgePanel(copies)


def kappa(a: Sequence[float], b: Sequence[float]) -> float:
    """Cohen's kappa of two three-level gradings (``nan`` when it is undefined: both give one level only); the
    levels 0 / 0.5 / 1 are passed to sklearn as the classes 0 / 1 / 2 (it takes 0.5 for a continuous value)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(_levels(a), _levels(b), labels=[0, 1, 2])
    return float(value)


def _levels(scores: Sequence[float]) -> list[int]:
    return [round(2 * float(x)) for x in scores]


def _kappa_of_resamples(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """Cohen's kappa of level codes (0 / 1 / 2) along ``axis``, for many resamples at once (the same formula as
    :func:`kappa`, checked against it in the tests); a resample in which both gradings use one and the same level
    agrees perfectly and counts as 1."""
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    one_a, one_b = np.eye(3)[a.astype(int)], np.eye(3)[b.astype(int)]
    n = a.shape[-1]
    observed = (one_a * one_b).sum(axis=(-2, -1)) / n
    expected = (one_a.sum(-2) * one_b.sum(-2)).sum(-1) / n**2
    with np.errstate(invalid="ignore", divide="ignore"):
        value = (observed - expected) / (1.0 - expected)
    return np.where(expected >= 1.0, 1.0, value)


def _kappa_interval(a: Sequence[float], b: Sequence[float], n_resamples: int) -> tuple[float, float] | None:
    """Bootstrap 95 % interval of :func:`kappa` over items (paired, percentile, seed 0); ``None`` if undefined."""
    if len(a) < 2 or math.isnan(kappa(a, b)):
        return None
    result = stats.bootstrap(
        (np.asarray(_levels(a)), np.asarray(_levels(b))),
        _kappa_of_resamples,
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        method="percentile",
        random_state=np.random.default_rng(0),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def agreement(labels: Sequence[float], scores: Sequence[float], n_resamples: int = _RESAMPLES) -> dict[str, Any]:
    """``n``, ``accuracy`` and ``kappa`` of ``scores`` against ``labels``, each with ``_ci_low`` / ``_ci_high``."""
    hits = [float(a == b) for a, b in zip(labels, scores)]
    accuracy = mean_interval(hits, n_resamples=n_resamples)
    value = kappa(labels, scores) if labels else math.nan
    interval = _kappa_interval(labels, scores, n_resamples)
    return {
        "n": len(hits),
        "accuracy": sum(hits) / len(hits) if hits else None,
        "accuracy_ci_low": accuracy[0] if accuracy else None,
        "accuracy_ci_high": accuracy[1] if accuracy else None,
        "kappa": None if math.isnan(value) else value,
        "kappa_ci_low": interval[0] if interval else None,
        "kappa_ci_high": interval[1] if interval else None,
    }


def judge_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts a ``judge`` run uses (for its provenance)."""
    return [] if arguments.get("judges") else ["judge: grounded judge (an attribute parser, not a model)"]


@run_command("judge", judge_stand_ins)
def judge(
    benchmark: BenchmarkName | None = None,
    items: str | None = None,
    judges: list[Judge] | None = None,
    out_dir: OutDir = "checkpoints/judge",
    n_resamples: int = _RESAMPLES,
) -> dict[str, Any]:
    """Grade explanations with a judge panel; where labels exist, print each judge's agreement with them.

    Args:
        benchmark: the fact sheet of rows without a ``benchmark`` field (``shifts``, ``cmnist``, ``clevr``);
            without ``items``, grade only that benchmark's part of the shipped labelled set.
        items: a JSONL file of explanations (``text``, ``true_class``, ``predicted_class``, ``attributes``,
            ``cause``, optional ``label`` and ``group``); default: the shipped labelled set.
        judges: the judge panel (``LLMJudge`` per model through its backend, ``GroundedJudge``); default: the
            offline grounded judge (an attribute parser, not a model).
        n_resamples: bootstrap resamples of every interval.

    Writes ``scores.jsonl`` (one row per item, in input order) and, with labels, ``agreement.json`` under
    ``out_dir``; language-model replies are cached in ``out_dir/llm_cache``.

    Returns:
        ``{"scores": path, "agreement": path or None, "judges": {...}, "pairs": {...}}``.
    """
    rows = _rows(benchmark, items)
    configured = list(judges) if judges else [GroundedJudge()]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for j in configured:
        if isinstance(j, LLMJudge):
            j.backend.attach_cache(out / "llm_cache")
    lines = _grade(rows, configured)
    scores_path = out / "scores.jsonl"
    scores_path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    names = [j.name for j in configured]
    result: dict[str, Any] = {"scores": str(scores_path), "agreement": None, "pairs": {}}
    labelled = [line for line in lines if line["label"] is not None]
    result["judges"] = {name: _agreement_with_labels(name, labelled, lines, n_resamples) for name in names}
    for k, a in enumerate(names):
        for b in names[k + 1 :]:
            both = [x for x in lines if x["judges"][a] is not None and x["judges"][b] is not None]
            pair = agreement([x["judges"][a] for x in both], [x["judges"][b] for x in both], n_resamples)
            result["pairs"][f"{a} vs {b}"] = pair
    if labelled:
        result["agreement"] = str(out / "agreement.json")
        write_json_atomic(out / "agreement.json", {"judges": result["judges"], "pairs": result["pairs"]})
        _print_agreement(result)
    elif result["pairs"]:
        _print_pairs(result["pairs"])
    print(f"scores of {len(rows)} items: {scores_path}")
    return result


def _rows(benchmark: str | None, items: str | None) -> list[dict[str, Any]]:
    """The items to grade: a JSONL file on one benchmark's sheet, or the shipped set (one benchmark's part)."""
    if benchmark is not None and benchmark not in FACT_SHEETS:
        raise UserInputError(f"unknown benchmark {benchmark!r}; expected one of {sorted(FACT_SHEETS)}")
    if items is None:
        return [r for r in read_items(SHIPPED_LABELS, None) if benchmark in (None, r["benchmark"])]
    if benchmark is None:
        raise UserInputError("pass --benchmark (shifts, cmnist or clevr) for the items' fact sheet")
    return read_items(items, benchmark)


def _grade(rows: list[dict[str, Any]], configured: list[Judge]) -> list[dict[str, Any]]:
    """One line per item, in input order: the panel's mean, each judge's score and reason, the grounding."""
    verdicts: list[Any] = [None] * len(rows)
    for name in dict.fromkeys(r["benchmark"] for r in rows):
        facts, panel = FACT_SHEETS[name], _panel(configured, name)
        indices = [i for i, r in enumerate(rows) if r["benchmark"] == name]
        asked = [
            JudgeItem(rows[i]["text"], str(rows[i]["true_class"]), str(rows[i]["predicted_class"]),
                      _attributes(rows[i], facts), rows[i]["cause"])
            for i in indices
        ]  # fmt: skip
        for i, verdict in zip(indices, panel.judge(asked)):
            verdicts[i] = verdict
    return [
        {"index": index, "benchmark": row["benchmark"], "group": row.get("group"), "split": row.get("split"),
         "label": row.get("label"),
         "score": verdict.mean, "judges": verdict.scores, "reasons": verdict.reasons,
         "grounding": verdict.grounding, "groundings": verdict.groundings}
        for index, (row, verdict) in enumerate(zip(rows, verdicts))
    ]  # fmt: skip


def _agreement_with_labels(name: str, labelled: list[dict], lines: list[dict], n_resamples: int) -> dict[str, Any]:
    """One judge's agreement with the labels: overall, per split and per group; and how often it failed."""
    graded = [line for line in labelled if line["judges"][name] is not None]
    splits = sorted({x["split"] for x in graded if x["split"]})
    groups = {"all": graded} | {f"split:{k}": [x for x in graded if x["split"] == k] for k in splits}
    groups |= {g: [x for x in graded if x["group"] == g] for g in sorted({x["group"] for x in graded if x["group"]})}
    found = {
        g: agreement([x["label"] for x in part], [x["judges"][name] for x in part], n_resamples)
        for g, part in groups.items()
    }
    return found | {"failed": sum(line["judges"][name] is None for line in lines)}


def _cell(stats_: dict[str, Any], name: str) -> str:
    return format_with_interval(stats_[name], stats_[f"{name}_ci_low"], stats_[f"{name}_ci_high"])


def _print_agreement(result: dict[str, Any]) -> None:
    rows = []
    for name, groups in result["judges"].items():
        for group, s in groups.items():
            if group != "failed":
                rows.append([name, group, s["n"], _cell(s, "accuracy"), _cell(s, "kappa")])
    print_table(["judge", "group", "items", "accuracy [95% CI]", "Cohen's kappa [95% CI]"], rows)
    if result["pairs"]:
        _print_pairs(result["pairs"])


def _print_pairs(pairs: dict[str, Any]) -> None:
    rows = [[pair, s["n"], _cell(s, "accuracy"), _cell(s, "kappa")] for pair, s in pairs.items()]
    print_table(["judges", "items", "same score [95% CI]", "Cohen's kappa [95% CI]"], rows)
