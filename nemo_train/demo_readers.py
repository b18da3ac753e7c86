"""How the demo reads each step's headline numbers: a reader per kind of step, turning the step's result into
recap rows ``(method, metric, value)`` or, where the number is a mean over items with a bootstrap 95 % interval
stored beside it, ``(method, metric, value, ci_low, ci_high)``.

A number without per-item values (a training metric such as test accuracy, a count, a set-level score) has no
interval; its row stays a triple and ``recap.json`` stores ``null`` bounds for it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nemo_train.scoring.labels import match_label

if TYPE_CHECKING:
    from nemo_train.demo_steps import DemoContext, FitResult

#: A recap row: ``(method, metric, value)`` or ``(method, metric, value, ci_low, ci_high)``.
Row = tuple


def _interval(ci: Any) -> tuple[Any, Any]:
    """``(low, high)`` of a stored interval (a pair, or ``None`` for none)."""
    return (None, None) if ci is None else (ci[0], ci[1])


def _stored(holder: Any, metric: str) -> tuple[Any, Any]:
    """``(low, high)`` stored beside ``metric`` as ``<metric>_ci_low`` / ``<metric>_ci_high`` (keys of a dict or
    attributes of an object); ``(None, None)`` where there are none."""
    names = (f"{metric}_ci_low", f"{metric}_ci_high")
    if isinstance(holder, dict):
        return holder.get(names[0]), holder.get(names[1])
    return getattr(holder, names[0], None), getattr(holder, names[1], None)


def _finite(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def read_classifier(ctx: DemoContext, result: FitResult) -> list[Row]:
    """Test accuracy on bias-aligned and bias-conflicting images."""
    m = result.metrics
    return [
        ("classifier", "acc_aligned", m["test/acc_aligned"]),
        ("classifier", "acc_conflicting", m["test/acc_conflicting"]),
    ]


def read_explainer(ctx: DemoContext, result: FitResult) -> list[Row]:
    """Held-out explanation accuracy (share of pairs whose explanation names the right cause; keyword rule)."""
    return [
        ("tiny explainer", "explanation_acc (keyword rule, not manual grading)", result.metrics["val/explanation_acc"])
    ]


def read_captions(ctx: DemoContext, result: FitResult) -> list[Row]:
    """Held-out caption accuracy of the tiny VLM's first stage (per factor and mean)."""
    prefix = "val/caption_acc"
    return [
        ("tiny VLM (captions)", k.removeprefix("val/"), v)
        for k, v in sorted(result.metrics.items())
        if k.startswith(prefix)
    ]


def read_zoo(ctx: DemoContext, result: dict) -> list[Row]:
    """Each side's mean validation accuracy and mean test accuracy (on the zoo's test shift split)."""
    rows = []
    for side, label in (("train", "training zoo"), ("heldout", "held-out zoo")):
        members = [m for m in result["members"] if m["split"] == side]
        method = f"{label} ({len(members)} classifiers, mean)"
        for key, metric in (("val_acc", "val_acc"), ("test_acc", f"test_acc ({result['test_shift']} shift)")):
            rows += [(method, metric, sum(m[key] for m in members) / len(members))] if members else []
    return rows


def read_grpo(ctx: DemoContext, result: FitResult) -> list[Row]:
    """The reinforcement step's rewards: the last training step's (``train/reward``) and the held-out errors' at
    the last validation (``val/reward``: the scoring of the tables), with the KL to the distilled policy."""
    m = result.metrics
    keys = ("train/reward", "val/reward", "val/reward/llm_match", "val/reward/cei", "train/kl")
    return [("GRPO from the distilled student", key, m[key]) for key in keys if key in m]


def read_teacher(ctx: DemoContext, result: dict) -> list[Row]:
    """How many teacher labels became training pairs, and their mean CEI."""
    return [
        ("Teacher (exhaustive search, not a model)", k, v, *_stored(result, k))
        for k, v in result.items()
        if k in ("labels", "kept", "mean_cei")
    ]


def read_distilled(ctx: DemoContext, result: FitResult) -> list[Row]:
    """The student's answers on held-out pairs at the last validation: against the teacher's answers
    (``val/answer_acc``: factor, value and classes all right, and each part) or, where the run scores them, CEI
    and LLM Match."""
    m = result.metrics
    rows = [("Student", k.removeprefix("val/"), v) for k, v in sorted(m.items()) if k.startswith("val/answer_acc")]
    rows += [("Student", "cei", m["nemo/cei"])] if "nemo/cei" in m else []
    for key in ("llm_match", "rule_match"):  # rule_match: no judge was a language model
        if f"nemo/{key}" in m:
            judges = [k.split("/", 2)[2] for k in m if k.startswith(f"nemo/{key}/") and k.count("/") == 2]
            rows.append(("Student", match_label(judges) if judges else key, m[f"nemo/{key}"]))
    return rows


def _shares(step_target: str, counts: dict[str, int] | None) -> list[Row]:
    from nemo_train.scoring.shift_benchmark import cause_shares

    return [(step_target, f"share/{cause}", share) for cause, share in cause_shares(counts or {}).items()]


def read_distill_eval(ctx: DemoContext, result: dict) -> list[Row]:
    """LLM Match / grounding / CEI of each row (teacher, student, methods driven by the student, known cause,
    trivial rows) and the cause shares of the first target's errors. Over several targets (a zoo) only the rows
    pooled over them, each with its interval over the pooled errors and its edits per error where it tests any;
    over one target, that target's rows."""
    pooled = result.get("pooled")
    targets = result.get("pooled_targets") or []
    rows = _shares("causes" if not pooled else f"causes @ {targets[0]}", result.get("cause_counts"))
    if pooled:
        cells = {f"{method} (pooled over {len(targets)} classifiers)": v for method, v in pooled.items()}
    else:
        cells = {" @ ".join(key.split("|", 1)): v for key, v in result["summary"].items()}
    for method, v in cells.items():
        for metric in ("llm_match", "grounding", "cei"):
            if _finite(v.get(metric)):
                label = match_label(result.get("judges", [])) if metric == "llm_match" else metric
                rows.append((method, label, v[metric], *_stored(v, metric)))
        if v.get("edits"):  # mean counterfactual tests per error (the teacher's candidate edits)
            rows.append((method, "edits/error", v["edits"]))
    return rows


def read_differences(ctx: DemoContext, result: Any) -> list[Row]:
    """Completeness, Density and Token Length of each explainer of how Model A and Model B differ."""
    parts = {"evaluator": result.evaluator, "summarizer": result.summarizer, "explorer": result.explorer}
    rules = [part for part, label in parts.items() if not label.startswith("LLM ")]
    note = f" ({', '.join(rules)}: rules, not LLMs)" if rules else ""
    scores = {r.method: r for r in result.rows}
    return [
        (method + note, metric, v[metric], *_stored(scores[method], metric))
        for method, v in result.headline().items()
        for metric in ("completeness", "density", "token_length")
    ]


def read_lbee(ctx: DemoContext, result: Any) -> list[Row]:
    """ACR / AHR / TPR / JI of each sentence-selection method on the hard clusters."""
    return [
        (s.method, metric, getattr(s, metric), *_stored(s, metric))
        for s in result.scores
        for metric in ("acr", "ahr", "tpr", "ji")
    ]


def read_counterfactuals(ctx: DemoContext, result: Any) -> list[Row]:
    """Success rate (share of counterfactuals above the competency threshold) of each method."""
    return [
        (method, "success", v["success"], *_stored(v, "success"))
        for method, v in result.table.items()
        if method != "Orig"
    ]


def read_clip(ctx: DemoContext, result: FitResult) -> list[Row]:
    """Zero-shot accuracy of every attribute on held-out images (prompt classification in the trained space)."""
    prefix = "val/zeroshot/"
    return [
        ("CLIP", f"zeroshot/{k[len(prefix) :]}", v) for k, v in sorted(result.metrics.items()) if k.startswith(prefix)
    ]


def read_nemo(ctx: DemoContext, result: Any) -> list[Row]:
    """LLM Match, grounding and CEI of each method on each target, the cause shares, and how often the known
    cause beats a distractor."""
    rows = [row for target, counts in result.cause_counts.items() for row in _shares(target, counts)]
    for c in result.cells:
        method = c.label if len({x.target for x in result.cells}) == 1 else f"{c.label} @ {c.target}"
        rows += [
            (
                method,
                match_label(c.per_judge) if metric == "llm_match" else metric,
                getattr(c, metric),
                *_interval(c.intervals.get(metric)),
            )
            for metric in ("llm_match", "grounding", "cei")
            if _finite(getattr(c, metric))
        ]
    if result.known_cause_win_rate is not None:
        ci = _interval(getattr(result, "known_cause_win_rate_ci", None))
        rows.append(("KnownCause", "beats_distractor_cei", result.known_cause_win_rate, *ci))
    return rows


def read_numbers(ctx: DemoContext, result: Any) -> list[Row]:
    """Every top-level number a pipeline returns (for steps without a reader of their own)."""
    if not isinstance(result, dict):
        return []
    return [
        ("", key, value)
        for key, value in result.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
