"""The shifted-digits benchmark: errors with a different cause each, established exactly by the generator.

A classifier trained with several planted gaps (``configs/shifts/``) is tested on images that each have one
factor, or two to three at once (the datamodule's ``test_shift: multi``, which the shipped presets use), moved
away from their training-typical values. With several factors off, which of them causes an error depends on the
classifier's gaps, so an explainer has to know the classifier, not only spot the image's unusual factors. For
every misclassified image, each factor that is not typical is re-rendered back to its typical value and
classified again (:func:`datamodules.shifts.label_causes`): the cause of the error is the factor whose single
re-render gives the true class. Errors with no such factor (``none``) or with more than one (``several``) are
counted apart and never explained. The share of each cause is kept with the benchmark (``cause_counts``).

The reference database SciTX retrieves from is training-like data, as ImageNet is for ImageNet-R: images of the
classifier's own training distribution (the validation split of its gap datamodule), not the rest of the test
set. Mining for distillation renders the same shift distribution from the training handwriting pool, so no mined
image is an evaluation image.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import torch

from datamodules.shifts import FACTS, ShiftsDataModule, label_causes
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet, check_classes, classify

#: Which split the errors come from: the held-out test pool, or the mining split (training handwriting pool).
ShiftSplit = Literal["test", "mining"]
#: How the ``n`` errors are drawn among the single-cause ones: ``uniform`` (every such error equally likely, so
#: the causes come in the classifier's own proportions) or ``by_cause`` (the causes in turn, each error drawn
#: uniformly within its cause, so every cause gets an equal share as far as the classifier makes such errors; a
#: constant answer then scores about one over the number of causes whatever the classifier's commonest cause).
ErrorSampling = Literal["uniform", "by_cause"]
#: Cause labels of errors that are not explained (no single factor fixes them, or several do).
UNEXPLAINED = ("none", "several")


def cause_table(counts: dict[str, int]) -> list[tuple[str, int, float]]:
    """``(cause, errors, share among single-cause errors)`` rows, causes first, then ``none`` / ``several``."""
    single = sum(v for k, v in counts.items() if k not in UNEXPLAINED)
    rows = [(k, v, v / single if single else 0.0) for k, v in sorted(counts.items()) if k not in UNEXPLAINED]
    return rows + [(k, counts.get(k, 0), float("nan")) for k in UNEXPLAINED]


def cause_shares(counts: dict[str, int]) -> dict[str, float]:
    """Share of each established cause among the errors that have exactly one."""
    return {cause: share for cause, _, share in cause_table(counts) if cause not in UNEXPLAINED}


def print_causes(counts: dict[str, int], target: str) -> None:
    """The table of established causes of one classifier's errors (shares among single-cause errors)."""
    print_table(
        ["cause", "errors", "share"],
        cause_table(counts),
        title=f"Causes of {target}'s errors (re-rendering each shifted factor to its typical value)",
        caption="none / several: no single factor or more than one fixes the error (not explained)",
        digits=3,
    )


def build_shift_benchmark(
    target,
    gaps: str = "gaps_a",
    n: int = 100,
    seed: int = 0,
    split: ShiftSplit = "test",
    size: int = 3000,
    datamodule_kwargs: dict[str, Any] | None = None,
    error_sampling: ErrorSampling = "uniform",
) -> NemoBenchmark:
    """``n`` errors of ``target`` on the shift distribution, each with the cause the generator established.

    Args:
        target: the classifier (``predict``, ``predict_proba``, ``features``).
        gaps: the gap preset of the classifier's training data (its references are drawn from it).
        n: errors sampled (seeded) among those with exactly one cause.
        seed: sampling seed (the mining split also draws its images with it).
        split: ``test`` (held-out handwriting) or ``mining`` (training handwriting, for a distillation teacher).
        size: images of the split that are classified.
        datamodule_kwargs: more :class:`~datamodules.shifts.ShiftsDataModule` arguments.
        error_sampling: how the ``n`` errors are drawn (:data:`ErrorSampling`).
    """
    if n < 1:
        raise UserInputError(f"n={n}; expected at least one error to sample")
    kwargs = {"test_size": size, **(datamodule_kwargs or {})}
    dm = ShiftsDataModule(gaps=gaps, **kwargs)
    dm.setup("fit")
    renderer = dm.renderer
    data = dm.test_set if split == "test" else dm.shifted_split("train", size, seed)
    check_classes(target, len(dm.class_names), "the shifts benchmark", data.images[:1].float() / 255.0)
    predictions, _ = classify(target, data.images, desc=f"classifying the shifts {split} split")
    wrong = torch.nonzero(predictions != data.labels).flatten()
    attrs = {k: v[wrong] for k, v in data.attrs.items()}
    causes = label_causes(renderer, FACTS, attrs, data.labels[wrong], target.predict)
    counts = dict(Counter(causes))
    single = [(int(i), c) for i, c in zip(wrong, causes) if c not in UNEXPLAINED]
    if not single:
        raise UserInputError(f"the classifier makes no error with a single cause on the shifts {split} split")
    order = sample_errors([c for _, c in single], n, seed, error_sampling)
    prefix = "shifts" if split == "test" else "mine-shifts"
    errors = []
    for j in order.tolist():
        i, cause = single[j]
        errors.append(
            ErrorSample(
                f"{prefix}-{i:05d}",
                data.images[i].float() / 255.0,
                int(data.labels[i]),
                int(predictions[i]),
                {k: int(v[i]) for k, v in data.attrs.items()},
                cause=cause,
            )
        )
    reference = training_like_references(dm, target)
    factors = list(FACTS.factors)
    cause = {
        "attribute": None,
        "editable": [f.name for f in factors],
        "distractor": FACTS.distractors[0] if FACTS.distractors else None,
        "object": FACTS.object_word,
        "typical": {f.name: f.typical_stored for f in factors if f.typical is not None},
    }
    return NemoBenchmark(
        "shifts",
        list(dm.class_names),
        "shifts",
        errors,
        reference,
        renderer,
        dict(renderer.attributes),
        cause,
        facts=FACTS,
        cause_counts=counts,
    )


def sample_errors(causes: list[str], n: int, seed: int, error_sampling: ErrorSampling = "uniform") -> torch.Tensor:
    """Indices (sorted) of ``n`` of the errors whose ``causes`` are given, drawn with ``seed`` as ``error_sampling``
    says (:data:`ErrorSampling`)."""
    gen = torch.Generator().manual_seed(seed)
    if error_sampling == "uniform":
        return torch.randperm(len(causes), generator=gen)[:n].sort().values
    if error_sampling != "by_cause":
        raise UserInputError(f"error_sampling={error_sampling!r}; expected 'uniform' or 'by_cause'")
    queues = []
    for cause in sorted(set(causes)):
        rows = torch.tensor([i for i, c in enumerate(causes) if c == cause])
        queues.append(rows[torch.randperm(len(rows), generator=gen)].tolist())
    picked: list[int] = []
    while len(picked) < n and any(queues):
        for queue in queues:  # one of each cause in turn; a cause that runs out drops out
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return torch.tensor(sorted(picked), dtype=torch.long)


def training_like_references(dm: ShiftsDataModule, target) -> ReferenceSet:
    """The classifier's own training distribution (its validation split): images, predictions, features and
    captions from the fact sheet."""
    data = dm.val_set
    predictions, features = classify(target, data.images, desc="classifying the training-like references")
    attrs = [{k: int(v[i]) for k, v in data.attrs.items()} for i in range(len(data.labels))]
    return ReferenceSet(
        images=data.images,
        labels=data.labels,
        predictions=predictions,
        features=features,
        captions=[FACTS.caption(a) for a in attrs],
        attrs=attrs,
        image_size=data.images.shape[-1],
    )
