"""The parts of ``distill-teacher``: the classifier it labels, the teacher's scorer, labelling in batches with
retries, the stored labels and their settings."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nemo_train.backends.base import BackendError, ChatBackend
from nemo_train.errors import UserInputError
from nemo_train.models.specs import ClassifierSpec, as_classifier
from nemo_train.models.targets import ClassMapping
from nemo_train.nemo.distill.teachers import TeacherLabel
from nemo_train.nemo.evaluation import record_key
from nemo_train.quiet import progress_bar
from nemo_train.scoring.editors import DiffusersEdit
from nemo_train.scoring.interventions import (
    CounterfactualScorer,
    ExactAttributeEditor,
    LLMAttributeDeriver,
)
from nemo_train.sharding import ShardedResultStore
from nemo_train.store import fingerprint


def build_target(classifier: str | ClassifierSpec, mapping: ClassMapping | None = None):
    """The classifier model (a timm model mapped onto the folder's classes, or a checkpoint's classifier)."""
    spec = as_classifier(classifier)
    spec.check()
    return spec.build(None if mapping is None else mapping.class_names, mapping)


def teacher_scorer(
    bench, target, backend: ChatBackend, editor: DiffusersEdit | None, seed: int
) -> CounterfactualScorer:
    """The MLLM teacher's counterfactual test: exact re-render of the attribute it names on generated data,
    or the editing instruction it writes applied by a diffusers editor."""
    if bench.renderer is not None:
        deriver = LLMAttributeDeriver(backend, bench.vocabulary, editable=bench.cause["editable"])
        return CounterfactualScorer(target, deriver, ExactAttributeEditor(bench.renderer))
    if editor is None:
        raise UserInputError("an MLLM teacher on folder data needs editor: a DiffusersEdit with a model id or folder")
    return editor.build_scorer(bench, target, backend, seed, batched=True)


def _label_chunk(teacher, chunk, bench, failed: list[str]) -> list[tuple[Any, TeacherLabel | None]]:
    """``(error, label)`` for the errors of ``chunk`` the teacher labelled; when the batched request fails for
    good each error is retried alone (replies that came back are cached), and the reason of every error
    that still fails is added to ``failed``."""
    try:
        return list(zip(chunk, teacher.label_batch(chunk, bench)))
    except BackendError as err:
        if len(chunk) == 1:
            failed.append(str(err))
            return []
        return [pair for sample in chunk for pair in _label_chunk(teacher, [sample], bench, failed)]


@dataclass
class PoolClassifier:
    """One more classifier of a pool (generated data): the teacher labels its mined errors too.

    Args:
        classifier: its checkpoint (its experiment folder names it, as for ``classifier``).
        bias: the bias of its training data: a preset (``model_a``, ``gaps_b``), ``{digit: [colour, ...]}`` (CMNIST)
            or ``{factor: [digits]}`` (shifts gaps); the mined errors are its bias-conflicting ones.
    """

    classifier: str
    bias: str | dict[int, list[str]] | dict[str, list[int]] | None = None


def mining_identity(dataset, n, seed, styles, bias, data_kwargs, mining_root) -> dict[str, Any]:
    """What decides the mined errors and their reference set (a label is recomputed when any of it changes)."""
    folder = str(Path(mining_root).resolve()) if mining_root else None
    found = {"dataset": dataset, "n": n, "seed": seed, "styles": styles, "bias": bias, "data_kwargs": data_kwargs}
    return json.loads(json.dumps({**found, "folder": folder}, default=str))  # as it reads back from the store


#: upper bounds of distill-teacher's sizes (the mining grid holds ``styles`` images per attribute cell; the
#: shifts data ``10 * n`` images)
MAX_STYLES, MAX_ERRORS = 50, 100_000


def check_teacher_ranges(n: int, seed: int, styles: int, m: int, k: int, val_fraction: float) -> None:
    """A one-line error for an option out of range, before anything is built or written."""
    for name, value, low, high in (("n", n, 1, MAX_ERRORS), ("styles", styles, 1, MAX_STYLES), ("m", m, 1, 1000),
                                   ("k", k, 1, 1000), ("seed", seed, 0, 2**32 - 1)):  # fmt: skip
        if not low <= value <= high:
            raise UserInputError(f"{name}={value} is out of range; expected {low} to {high:,}")
    if not 0.0 <= val_fraction < 1.0:
        raise UserInputError(f"val_fraction={val_fraction} is out of range; expected a share from 0 to below 1")


def image_digest(image: torch.Tensor) -> str:
    """SHA-256 of an error image's values (its identity in a label's settings)."""
    return hashlib.sha256(image.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def label_settings(bench, settings: dict) -> dict[str, dict]:
    """The settings of each error's label: a label is paired with the very image it was computed on, so the
    image's digest is part of them."""
    return {s.sample_id: {**settings, "image_sha256": image_digest(s.image)} for s in bench.errors}


def _label_errors(
    teacher,
    bench,
    store: ShardedResultStore,
    name: str,
    own: dict[str, dict],
    min_cei: float,
    error_batch: int,
    shard: Callable[[list], list] = list,
) -> tuple[int, list[str]]:
    """Label this process's share (``shard``) of the errors of ``bench`` not in ``store`` yet, ``error_batch``
    at a time, appending each label; returns ``(errors labelled now, reasons of the errors that failed)``."""
    failed: list[str] = []
    pending = [
        s for s in bench.errors if store.lookup(record_key(name, teacher.name, s.sample_id), own[s.sample_id]) is None
    ]
    mine = shard(pending)
    total = len(bench.errors)
    bar = progress_bar(total=total, initial=total - len(mine), desc=f"teacher {name}", unit="error")
    computed = 0
    for start in range(0, len(mine), error_batch):
        chunk = mine[start : start + error_batch]
        for sample, label in _label_chunk(teacher, chunk, bench, failed):
            record = {"key": record_key(name, teacher.name, sample.sample_id), "kept": False, "cei": 0.0}
            record["sample_id"] = sample.sample_id
            if label is not None:
                record.update(label.to_json(), kept=label.cei >= min_cei)
            else:  # no readable hypothesis or edit (e.g. replies that are not JSON): a failure, retried on rerun
                record.update(failed=True, reason="the teacher gave no readable hypothesis with an edit")
                failed.append(record["reason"])
            store.append(record, own[sample.sample_id])
            computed += 1
        bar.update(len(chunk))
    bar.close()
    return computed, failed


def stored_labels(store: ShardedResultStore, bench, name: str, teacher_name: str, own: dict[str, dict]) -> list[dict]:
    """The labels of every error of ``bench`` computed with its current settings, in the errors' order."""
    return [
        r
        for r in (store.get(record_key(name, teacher_name, s.sample_id)) for s in bench.errors)
        if r and not r.get("failed") and r.get("fingerprint") == fingerprint(own[r["sample_id"]])
    ]


def teacher_stand_ins(arguments: dict[str, Any]) -> list[str]:
    """The non-model parts a ``distill-teacher`` run uses (for its provenance)."""
    if arguments.get("hypotheses") is None:
        return ["teacher: exhaustive attribute search over the generator's factors (not a language model)"]
    return []
