"""Builders of image-explanation pairs: the embedded six-cause pairs and the CMNIST bias-error pairs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from datamodules.cmnist import COLOR_NAMES, CMNISTDataModule
from datamodules.explanations.images import to_pil
from datamodules.explanations.records import ExplanationRecord, write_records
from datamodules.six_causes import SixCausesDataModule
from nemo_train.errors import UserInputError
from nemo_train.vocabulary import BIAS_PROMPT, CAUSES, EXPLANATIONS, bias_explanation


def _save_png(image: torch.Tensor, path: Path) -> str:
    to_pil(image).save(path)
    return str(path.resolve())


def _split(records: list[ExplanationRecord], val_fraction: float, seed: int) -> tuple[list, list]:
    if not 0.0 <= val_fraction < 1.0:
        raise UserInputError(f"val_fraction={val_fraction}; expected a value in [0, 1)")
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = math.ceil(val_fraction * len(records)) if val_fraction else 0
    val = sorted(order[:n_val])
    train = sorted(order[n_val:])
    return [records[i] for i in train], [records[i] for i in val]


def build_six_cause_pairs(
    out_dir: str | Path,
    per_cause: int = 100,
    seed: int = 0,
    val_fraction: float = 0.2,
    source: L.LightningDataModule | None = None,
    competency: Any = None,
    threshold: float = 0.9,
    severity_range: tuple[float, float] = (0.5, 1.0),
) -> dict[str, Path]:
    """Write six-cause pairs  as ``train.jsonl`` / ``val.jsonl`` under ``out_dir``.

    Corrupted images come from :class:`datamodules.six_causes.SixCausesDataModule` over ``source``
    (default: the CMNIST test grid), optionally filtered by a ``competency`` function. Each pair's
    counterfactual is the clean original (the ideal high-competency counterfactual); the explanation is
    one of the reference sentences of its cause, picked at random; ``severity_range`` is passed to
    ``apply_cause`` (see :mod:`datamodules.six_causes`). Returns ``{"train": ..., "val": ...}``.
    """
    out = Path(out_dir)
    images_dir = out / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    source = source or CMNISTDataModule(train_size=10, test_styles=1, seed=seed)  # only its test grid is used
    six = SixCausesDataModule(
        source,
        competency=competency,
        threshold=threshold,
        per_cause=per_cause,
        severity_range=severity_range,
        seed=seed,
    )
    six.setup()
    gen = torch.Generator().manual_seed(seed + 1)
    records = []
    for index in range(len(six.dataset)):
        sample = six.dataset[index]
        cause = CAUSES[int(sample["group"])]
        variants = EXPLANATIONS[cause]
        records.append(
            ExplanationRecord(
                image=_save_png(sample["image"], images_dir / f"{index:06d}.png"),
                counterfactual=_save_png(sample["clean"], images_dir / f"{index:06d}_clean.png"),
                explanation=variants[int(torch.randint(len(variants), (1,), generator=gen))],
                cause=cause,
                label=int(sample["label"]),
            )
        )
    train, val = _split(records, val_fraction, seed)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}


@torch.no_grad()
def build_cmnist_bias_pairs(
    out_dir: str | Path,
    classifier: torch.nn.Module,
    datamodule: L.LightningDataModule,
    max_pairs: int | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> dict[str, Path]:
    """Write pairs for the CMNIST bias-conflicting errors of ``classifier`` (the planted colour bias is the cause).

    Every misclassified bias-conflicting test image becomes a pair whose counterfactual is the same digit
    re-rendered (same exemplar and angle) in a colour the bias allows, and whose explanation blames the
    stroke colour. Returns ``{"train": ..., "val": ...}``; raises :class:`UserInputError` if the classifier
    makes no such error.
    """
    datamodule.setup("test")
    out = Path(out_dir)
    images_dir = out / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    renderer = datamodule.test_renderer
    allowed = datamodule.bias.allowed_matrix()  # [digit, colour]
    device = next(classifier.parameters()).device
    classifier.eval()
    records: list[ExplanationRecord] = []
    for batch in DataLoader(datamodule.test_set, batch_size=256):
        images = batch["image"]
        predictions = classifier(images.to(device)).argmax(-1).cpu()
        wrong = (predictions != batch["label"]) & (batch["group"] == 1)
        for i in wrong.nonzero().flatten().tolist():
            if max_pairs is not None and len(records) >= max_pairs:
                break
            attrs = {k: int(v[i]) for k, v in batch["attrs"].items()}
            digit, color = attrs["digit"], attrs["color"]
            aligned_color = int(allowed[digit].nonzero()[0])
            counterfactual = renderer.render(digit, aligned_color, attrs["angle"], attrs["style"])
            index = len(records)
            users = [d for d in range(10) if allowed[d, color]]
            records.append(
                ExplanationRecord(
                    image=_save_png(images[i], images_dir / f"{index:06d}.png"),
                    counterfactual=_save_png(counterfactual, images_dir / f"{index:06d}_cf.png"),
                    explanation=bias_explanation(COLOR_NAMES[color], digit, int(predictions[i]), users),
                    prompt=BIAS_PROMPT,
                    cause="color",
                    label=digit,
                    prediction=int(predictions[i]),
                )
            )
    if not records:
        raise UserInputError(
            "the classifier makes no bias-conflicting error on the CMNIST test grid; nothing to explain"
        )
    train, val = _split(records, val_fraction, seed)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}
