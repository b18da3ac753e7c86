"""``distill-eval``'s targets from a zoo, and its report pooled over several classifiers.

:func:`zoo_targets` adds the members of one side of a ``nemo-train zoo`` folder to the targets (each with its gap
spec as its bias) and reads the training zoo, whose members a student was distilled on (the Class prior row's
prior comes from their mining errors: :class:`~nemo_train.nemo.distill.trivial_rows.ClassPrior`).
:func:`pooled_report` pools every row over the targets (:mod:`nemo_train.nemo.distill.zoo_report`), prints that
table and draws the budget plot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.edit_rows import StudentEdits
from nemo_train.nemo.distill.evidence_rule import EvidenceRule
from nemo_train.nemo.distill.rows import ExhaustiveSearchExplainer, ExhaustiveTeacher
from nemo_train.nemo.distill.zoo_members import ZooClassifier, ZooSide, zoo_members
from nemo_train.nemo.distill.zoo_report import POOLED, budget_points, plot_budget, pooled_scores, print_pooled

#: The budget plot's file under ``out_dir``.
BUDGET_PLOT = "budget.png"


@dataclass
class TrainingZoo:
    """The training zoo's members (``None`` without a zoo) and what identifies them in the records' settings."""

    members: list[ZooClassifier] | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def zoo_targets(
    targets, biases, zoo: str | None, zoo_split: ZooSide, folder: bool
) -> tuple[list, list | None, TrainingZoo]:
    """``(targets, biases, training zoo)``: the given targets followed by the zoo side's members (with their gaps as
    biases); one-line errors for no target at all or a zoo on folder data."""
    targets = list(targets or [])
    if zoo is None:
        if not targets:
            raise UserInputError("targets is empty; give at least one classifier checkpoint (or a zoo) to explain")
        return targets, biases, TrainingZoo()
    if folder:
        raise UserInputError("a classifier zoo is a zoo of shifts classifiers; it needs dataset shifts")
    if biases is not None and len(biases) != len(targets):
        raise UserInputError(f"{len(biases)} biases for {len(targets)} targets; give one per target")
    members = zoo_members(zoo, zoo_split)
    training = zoo_members(zoo, "train")
    biases = list(biases or [None] * len(targets)) + [member.gaps for member in members]
    settings = {"training_zoo": [member.spec.identity() for member in training]}
    return targets + [member.spec for member in members], biases, TrainingZoo(training, settings)


def pooled_report(records: list[dict], summary: dict, rows, title: str, out: Path) -> dict[str, Any]:
    """Over two or more targets: every row pooled over them (printed, and kept under ``pooled``) and, with
    ``StudentEdits`` rows, the plot (with the ``EvidenceRule`` rows as the no-explainer curve beside it) of LLM Match and CEI against edits per error (``budget_plot``)."""
    targets = list(dict.fromkeys(t for _, t in summary))
    if len(targets) < 2:
        return {}
    pooled = pooled_scores((r for r in records if r is not None), targets)
    print_pooled(pooled, f"{title}: pooled over {len(targets)} classifiers")
    budget = [row.name for row in rows if isinstance(row, StudentEdits)]
    rule = [row.name for row in rows if isinstance(row, EvidenceRule)]
    teacher = ExhaustiveSearchExplainer.name if any(isinstance(row, ExhaustiveTeacher) for row in rows) else None
    points = budget_points(pooled, budget, teacher, rule)
    plot = plot_budget(points, out / BUDGET_PLOT, f"{title}: pooled over {len(targets)} classifiers")
    return {POOLED: pooled, "pooled_targets": targets, "budget": points, "budget_plot": str(plot) if plot else None}
