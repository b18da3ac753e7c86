"""How a ``differences`` run stores and reports the failures of its language-model parts, the same way for each.

* The evaluator answers every question or the run stops with one line (:class:`~nemo_train.differences.evaluators.
  EvaluatorFailed`): a score built on answers that never came would look like a real one.
* The summariser and the explorer count their requests and failures (failed for good after the backend's
  retries, or a reply without the explanation / conditions asked for) with the first reason. A method that
  could not be computed because of them is not scored (no 0 in the table): it is stored under ``failed``
  (method -> the part and the reason) in ``results.json``, and each part's counts under ``failures``.
* Each part with failures is reported in one line after the table.
* When every method asked for failed, the command exits with a one-line error (status 2) after writing
  ``results.json``; a rerun asks again (the replies received are cached).
"""

from __future__ import annotations

from typing import Any

from nemo_train.errors import UserInputError

#: Why a request failed when its reply stayed malformed after the backend's re-asks.
UNREADABLE = "a reply that stayed unreadable (no JSON object) after the re-asks"


class MethodsFailed(UserInputError):
    """Every method of a ``differences`` run failed: nothing was scored."""


def part_failures(parts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{role: {"label", "requests", "failed", "first_error"}}`` of the parts that had failures."""
    return {
        role: {
            "label": part.label,
            "requests": part.requests,
            "failed": part.failures,
            "first_error": part.first_error,
        }
        for role, part in parts.items()
        if getattr(part, "requests", 0) and getattr(part, "failures", 0)
    }


def summarization_failure(text: str, summarizer: Any) -> dict[str, str] | None:
    """Why Summarization has no explanation (``None`` when it has one): ``{"part", "reason"}``."""
    if text:
        return None
    reason = f"the summariser {summarizer.label} wrote no explanation ({summarizer.first_error or 'an empty reply'})"
    return {"part": "summarizer", "reason": reason}


def optimization_failure(best_text: str, summarizer: Any, explorer: Any) -> dict[str, str] | None:
    """Why Optimization has no result of its own (``None`` when it has one): no candidate explanation, or an
    explorer that failed on every proposal request (the conditions explored were only random fill-ins)."""
    if not best_text:
        return summarization_failure(best_text, summarizer)
    if explorer.requests and explorer.failures == explorer.requests:
        reason = (
            f"the explorer {explorer.label} failed on all {explorer.requests} requests ({explorer.first_error}); "
            "only random conditions were explored"
        )
        return {"part": "explorer", "reason": reason}
    return None


def failure_lines(failures: dict[str, dict[str, Any]], failed: dict[str, dict[str, str]]) -> list[str]:
    """One line per part with failures (and the methods left unscored because of it)."""
    lines = []
    for role, f in failures.items():
        unscored = [method for method, why in failed.items() if why["part"] == role]
        name = {"summarizer": "summariser"}.get(role, role)
        line = f"{name} {f['label']}: {f['failed']} of {f['requests']} requests failed (first: {f['first_error']})"
        lines.append(line + (f"; not scored: {', '.join(unscored)}" if unscored else ""))
    return lines


def check_some_scored(methods: list[str], failed: dict[str, dict[str, str]]) -> None:
    """A one-line error when every method asked for failed (``results.json`` already records why)."""
    if methods and all(method in failed for method in methods):
        reasons = "; ".join(f"{method}: {why['reason']}" for method, why in failed.items())
        raise MethodsFailed(
            f"every method failed, nothing was scored ({reasons}); results.json records them; rerun when the "
            "endpoint answers (the replies received are cached)"
        )
