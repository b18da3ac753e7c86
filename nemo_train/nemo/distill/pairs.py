"""The student's training pairs from kept teacher labels: one explanation record per error and view.

Labels of several classifiers (a pool with different biases) go into the same pair files; each record's
provenance names the classifier, and the train / val split is by error (all views of an error on one side). In
the ``evidence`` view each classifier's errors come with that classifier's readings of the references, so the
same digit and trait can have different answers in one pair file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from datamodules.explanations import ExplanationRecord, to_pil, write_records
from datamodules.sentences import Claims, format_answer, hypothesis_sentence
from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.evidence import ClassifierEvidence, EvidenceView, check_evidence_benchmark
from nemo_train.nemo.distill.teachers import View, view_inputs
from nemo_train.nemo.methods.change_mllm import ReferenceClass
from nemo_train.scoring.benchmark import NemoBenchmark


@dataclass
class LabelledErrors:
    """One classifier's kept teacher labels (``teacher.jsonl`` records), its mined errors and the model."""

    name: str
    labels: list[dict[str, Any]]
    benchmark: NemoBenchmark
    target: Any


def _save(image: torch.Tensor, path: Path) -> str:
    to_pil(image).save(path)
    return str(path.resolve())


def reference_name(shared: str | None, kind: str) -> str:
    """How a pair's provenance names a reference: ``typical``, the shared factor, or ``without <factor>``."""
    if shared is None:
        return "typical"
    return f"without {shared}" if kind == "restored" else shared


def pairs_from_labels(
    groups: list[LabelledErrors],
    out_dir: Path,
    views: list[View],
    val_fraction: float,
    seed: int,
    reference_class: ReferenceClass = "either",
    evidence_view: EvidenceView | None = None,
    claims: Claims = "values",
) -> dict[str, Path]:
    """Write the kept labels as explanation-record pairs, one per view, split by error into train / val.

    ``reference_class``: the correctly classified reference beside the error in the ``change`` view: the
    nearest of the true or predicted class, of only one of them, or the true class's ``prototype``. ``seed`` also
    draws the ``evidence`` view's references (:class:`~nemo_train.nemo.distill.evidence.ClassifierEvidence`), which
    its records carry as ``counterfactual`` (the montage beside the error); their provenance also keeps the factor
    each reference shares with the error (``typical``: none; ``without <factor>``: a leave-one-trait-out reference)
    and the classifier's readings, never shown to a student. ``evidence_view``: which references and question
    (default: one exemplar's single-trait references). ``claims``: the answers as the teacher wrote them
    (``values``), naming the cause's factor without its value (``factor``), or the factor alone, without the
    classes (``cause``); the last two for attribute edits only.
    """
    if "evidence" in views:
        for group in groups:
            check_evidence_benchmark(group.benchmark)
    evidence = ClassifierEvidence(seed, view=evidence_view)
    images_dir = out_dir / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    errors = [(group, label) for group in groups for label in group.labels]
    mined = {group.name: {s.sample_id: s for s in group.benchmark.errors} for group in groups}
    order = torch.randperm(len(errors), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = math.ceil(val_fraction * len(errors)) if val_fraction > 0 else 0
    val_errors = set(order[:n_val])
    train, val = [], []
    for i, (group, label) in enumerate(errors):
        bench = group.benchmark
        sample = mined[group.name][label["sample_id"]]
        for view in views:
            hidden = {}
            if view == "evidence":  # the provenance also keeps what each reference shares with the error (unseen)
                found = evidence.gather(sample, bench, group.target)
                built = sample.image, found.montage, found.question(sample, bench.class_names, bench.facts)
                hidden = {"references": [reference_name(n, k) for n, k in zip(found.shared, found.kinds)],
                          "readings": found.predictions}  # fmt: skip
            else:
                built = view_inputs(view, sample, bench, group.target, reference_class)
            if built is None:
                continue
            image, second, question = built
            stem = f"{group.name}-{sample.sample_id}_{view}"
            record = ExplanationRecord(
                image=_save(image, images_dir / f"{stem}.png"),
                counterfactual=_save(second, images_dir / f"{stem}_ref.png") if second is not None else None,
                explanation=_answer(label, sample, bench, claims),
                prompt=question,
                cause=sample.cause or (bench.cause or {}).get("attribute"),
                label=label["label"],
                prediction=label["prediction"],
                cei=round(label["cei"], 4),
                provenance={
                    "teacher": label["teacher"],
                    "classifier": group.name,
                    "sample_id": sample.sample_id,
                    "view": view,
                    **hidden,
                },
            )
            (val if i in val_errors else train).append(record)
    return {"train": write_records(train, out_dir / "train.jsonl"), "val": write_records(val, out_dir / "val.jsonl")}


def _answer(label: dict[str, Any], sample: Any, bench: NemoBenchmark, claims: Claims) -> str:
    """The pair's target answer: the teacher's, or (``factor`` / ``cause``) its sentence naming the factor without
    the value (and, for ``cause``, without the classes)."""
    if claims == "values":
        return label["answer"]
    edit = label["edit"]
    if not isinstance(edit, dict) or sample.attrs is None:
        raise UserInputError(f"claims: {claims} needs attribute edits (the exhaustive teacher on generated data)")
    obj = (bench.cause or {}).get("object", "object")
    text = hypothesis_sentence(sample, edit, bench.vocabulary, bench.class_names, obj, claims=claims)
    return format_answer(text, edit, bench.vocabulary)
