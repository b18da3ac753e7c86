"""Metrics of counterfactual images: validity, proximity, sparsity, realism, speed
(competency-counterfactuals paper, Sec. 3.2).

* :class:`SuccessRate` — fraction of counterfactuals whose competency reaches the threshold.
* :class:`PerceptualDistance` — mean of a perceptual distance (LPIPS, or a named fallback) to the original.
* :class:`MeanCosineSimilarity` — mean cosine similarity of feature / latent vectors of original and
  counterfactual, over the *valid* (successful) counterfactuals only, as in the paper.
* :class:`TimePerImage` — generation seconds per processed image.
* :func:`realism_metrics` — torchmetrics FID and KID, in Inception space or the classifier's feature space,
  keyed by a name that says which (``fid[inception]`` / ``fid[classifier]``).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.kid import KernelInceptionDistance

from nemo_train.metrics.perceptual import realism_features


def successes(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Which ``scores`` reach ``threshold`` (a boolean per counterfactual)."""
    return scores >= threshold


def success_rate(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Fraction of ``scores`` at least ``threshold``."""
    return successes(scores, threshold).float().mean()


def cosine_similarities(a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine similarity (float64) of each row of ``a`` and ``b`` (flattened), for the rows where ``valid`` is True."""
    sims = F.cosine_similarity(a.flatten(1).double(), b.flatten(1).double(), dim=1)
    return sims if valid is None else sims[valid.bool()]


def mean_cosine_similarity(a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cosine similarity of the rows of ``a`` and ``b`` (flattened), over rows where ``valid`` is True."""
    sims = cosine_similarities(a, b, valid)
    return sims.mean().float() if len(sims) else torch.tensor(float("nan"))


class _Float64Mean(MeanMetric):
    """torchmetrics' ``MeanMetric`` with float64 states (sums over thousands of images stay exact to print).

    With ``keep_values=True`` it also keeps every value it averaged (a ``cat`` state, gathered under DDP):
    :meth:`values` gives them, e.g. for a bootstrap interval of the mean over images.
    """

    def __init__(self, keep_values: bool = False, **kwargs) -> None:
        super().__init__(nan_strategy="disable", **kwargs)
        self.set_dtype(torch.float64)
        self.keep_values = keep_values
        if keep_values:
            self.add_state("kept", default=[], dist_reduce_fx="cat")

    def update(self, value, weight=None) -> None:
        super().update(value, weight)
        if self.keep_values:
            self.kept.append(torch.as_tensor(value, dtype=torch.float64).detach().flatten())

    def values(self) -> torch.Tensor:
        """Every value averaged so far, in update order (needs ``keep_values=True``)."""
        if not self.keep_values:
            raise RuntimeError(f"{type(self).__name__} was built without keep_values=True")
        kept = self.kept if isinstance(self.kept, list) else [self.kept]
        return torch.cat(kept).cpu() if kept else torch.zeros(0, dtype=torch.float64)

    def _apply(self, fn, exclude_state=""):
        # torchmetrics re-derives the metric's dtype from a float32 probe on every ``.to(device)``; keep float64
        # so updates are not cast down to float32
        this = super()._apply(fn, exclude_state)
        this._dtype = torch.float64
        return this

    @property
    def count(self) -> torch.Tensor:
        """Total weight seen so far (the number of values for an unweighted mean)."""
        return self.weight

    def compute(self) -> torch.Tensor:
        return (self.mean_value / self.weight).float()


class SuccessRate(_Float64Mean):
    """Fraction of counterfactuals with competency at least ``threshold``; ``update(scores)``."""

    higher_is_better = True

    def __init__(self, threshold: float = 0.9, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold={threshold}; expected a value in (0, 1)")
        self.threshold = threshold

    def update(self, scores: torch.Tensor) -> None:
        super().update(successes(scores.detach(), self.threshold).double())


class MeanCosineSimilarity(_Float64Mean):
    """Mean cosine similarity of paired vectors; ``update(a, b, valid=None)`` counts only ``valid`` rows."""

    higher_is_better = True

    def update(self, a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        super().update(cosine_similarities(a.detach(), b.detach(), valid))


class PerceptualDistance(_Float64Mean):
    """Mean ``distance(original, counterfactual)`` for a module such as LPIPS; ``name`` says which distance."""

    higher_is_better = False

    def __init__(self, distance: nn.Module, **kwargs) -> None:
        super().__init__(**kwargs)
        self.distance = distance
        self.name = getattr(distance, "name", type(distance).__name__)

    @torch.no_grad()
    def update(self, originals: torch.Tensor, counterfactuals: torch.Tensor) -> None:
        super().update(self.distance(originals.float(), counterfactuals.float()).double())


class TimePerImage(_Float64Mean):
    """Seconds per processed image; ``update(seconds, images)`` adds a batch's time and image count
    (a weighted mean: batches weigh by their image count; 0 while no image was processed)."""

    higher_is_better = False

    def update(self, seconds: float, images: int) -> None:
        images = int(images)
        if images > 0:
            super().update(torch.tensor(float(seconds) / images, dtype=torch.float64), images)

    def compute(self) -> torch.Tensor:
        return (self.mean_value / self.weight.clamp(min=1e-300)).float()


def realism_metrics(
    classifier: nn.Module,
    image_shape: tuple[int, int, int],
    inception_weights: str | None = None,
    kid_subset_size: int = 50,
) -> dict[str, Metric]:
    """``{"fid[<space>]": FID, "kid[<space>]": KID}`` from torchmetrics, ``<space>`` being ``inception``
    when torch-fidelity and its weights are present, else ``classifier`` (the classifier's features).

    Update each with ``update(images, real=True)`` for the reference set and ``real=False`` for the
    counterfactuals (float images in ``[0, 1]``). KID uses subsets of ``kid_subset_size`` images.
    """
    feature, space, path = realism_features(classifier, image_shape, inception_weights)
    extra = {"feature_extractor_weights_path": path} if path else {}
    fid = FrechetInceptionDistance(feature=feature, normalize=True, reset_real_features=False, **extra)
    with warnings.catch_warnings():  # its notice that features are kept in memory: the sets here are small
        warnings.filterwarnings("ignore", message=".*will save all extracted features in buffer.*")
        kid = KernelInceptionDistance(
            feature=feature, normalize=True, reset_real_features=False, subset_size=kid_subset_size, **extra
        )
    return {f"fid[{space}]": fid, f"kid[{space}]": kid}
