"""Grouped settings and the typed result of the ``counterfactuals`` pipeline.

Each group is a dataclass (one ``--<group>.<option>`` namespace on the command line, one mapping in a YAML
preset), so the pipeline's signature stays short and ``--help`` lists every option with its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nemo_train.errors import UserInputError

#: The photometric causes whose direction can be chosen, and the two directions.
DirectedCause = Literal["brightness", "contrast", "saturation"]
Direction = Literal["up", "down"]


def _positive(**values: int) -> None:
    bad = {k: v for k, v in values.items() if v < 1}
    if bad:
        raise UserInputError(", ".join(f"{k}={v}" for k, v in bad.items()) + "; expected a positive number")


@dataclass
class EstimatorArgs:
    """Where the PaRCE estimator comes from (the classifier it scores is the pipeline's ``classifier``).

    Args:
        autoencoder_checkpoint: a trained competency autoencoder (``nemo-train fit --config
            configs/competency/cmnist_autoencoder.yaml`` writes one), used instead of training one here.
        dir: folder of a saved PaRCE estimator; loaded if present, else written there (default
            ``<out_dir>/parce``).
        threshold: competency threshold in (0, 1) (paper: 0.9).
        loss_scale: the factor ``k`` in front of each class's mean loss in PaRCE (2 in the authors' code, 1 in
            the usual z-score); used when the estimator is calibrated here.
    """

    autoencoder_checkpoint: str | None = None
    dir: str | None = None
    threshold: float = 0.9
    loss_scale: float = 2.0

    def __post_init__(self) -> None:
        if not 0.0 < float(self.threshold) < 1.0:
            raise UserInputError(f"estimator.threshold={self.threshold} is out of range; expected a value in (0, 1)")
        if self.loss_scale <= 0:
            raise UserInputError(f"estimator.loss_scale={self.loss_scale}; expected a positive factor")


@dataclass
class TrainArgs:
    """Training done by the pipeline itself: only the competency autoencoder, when no saved one is given
    (the classifier is always a ``nemo-train fit`` checkpoint).

    Args:
        autoencoder_epochs: epochs of the competency autoencoder trained without a saved one.
    """

    autoencoder_epochs: int = 4

    def __post_init__(self) -> None:
        _positive(autoencoder_epochs=self.autoencoder_epochs)


@dataclass
class CauseArgs:
    """The six-cause set of low-competency images.

    Args:
        per_cause: low-competency images per cause.
        severity: range ``(low, high)`` of cause severities, within (0, 1].
        directions: ``up`` / ``down`` for brightness, contrast or saturation where the default (brightness
            up, contrast down, saturation down) should not be used.
    """

    per_cause: int = 20
    severity: tuple[float, float] = (0.5, 1.0)
    directions: dict[DirectedCause, Direction] | None = None

    def __post_init__(self) -> None:
        _positive(per_cause=self.per_cause)
        low, high = self.severity
        if not 0.0 < low <= high <= 1.0:
            raise UserInputError(f"causes.severity={list(self.severity)}; expected 0 < low <= high <= 1")


@dataclass
class EvalArgs:
    """How the counterfactuals are generated and scored.

    Args:
        batch_size: images per generator call.
        alexnet_weights: local AlexNet weights for LPIPS (else the torch hub cache, else ``1-ssim``).
        inception_weights: local Inception weights for FID / KID (else the classifier's feature space).
    """

    batch_size: int = 64
    alexnet_weights: str | None = None
    inception_weights: str | None = None

    def __post_init__(self) -> None:
        _positive(batch_size=self.batch_size)


@dataclass
class Calibration:
    """How well PaRCE is calibrated on the held-out images: their accuracy, mean score, the chosen ``z``
    offset and the reliability bins (mean score, accuracy, count per bin)."""

    holdout_accuracy: float
    holdout_mean_score: float
    zscore: float
    bins: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class CounterfactualRun:
    """What a ``counterfactuals`` run measured and where it wrote it.

    ``table`` maps each method (``Orig`` first) to its Table-1 metrics; ``causes`` holds the mean competency of
    the clean images and of each cause, and the image count per cause (``counts``); ``files`` names every
    output (``table``, ``results``, ``grid``, ``reliability``, ``estimator``, ``classifier``).
    """

    out_dir: Path
    table: dict[str, dict[str, float]]
    calibration: Calibration
    causes: dict
    files: dict[str, Path]

    @property
    def success(self) -> dict[str, float]:
        """Success rate of each method (the fraction of counterfactuals reaching the competency threshold)."""
        return {method: row["success"] for method, row in self.table.items() if method != "Orig"}
