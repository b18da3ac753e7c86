"""Metrics of counterfactual images (paper 004, Sec. 3.2): validity, proximity, sparsity, realism, speed.

* :class:`SuccessRate` — fraction of counterfactuals whose competency reaches the threshold.
* :class:`PerceptualDistance` — mean of a perceptual distance (LPIPS, or a named fallback) to the original.
* :class:`MeanCosineSimilarity` — mean cosine similarity of feature / latent vectors of original and
  counterfactual, over the *valid* (successful) counterfactuals only, as in the paper.
* :class:`TimePerImage` — generation seconds per processed image.
* :func:`realism_metrics` — torchmetrics FID and KID, in Inception space or the classifier's feature space,
  keyed by a name that says which (``fid[inception]`` / ``fid[classifier]``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric


def success_rate(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Fraction of ``scores`` at least ``threshold``."""
    return (scores >= threshold).float().mean()


def mean_cosine_similarity(a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cosine similarity of the rows of ``a`` and ``b`` (flattened), over rows where ``valid`` is True."""
    sims = F.cosine_similarity(a.flatten(1).double(), b.flatten(1).double(), dim=1)
    if valid is not None:
        sims = sims[valid.bool()]
    return sims.mean().float() if len(sims) else torch.tensor(float("nan"))


class SuccessRate(Metric):
    """Fraction of counterfactuals with competency at least ``threshold``; ``update(scores)``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, threshold: float = 0.9, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold={threshold}; expected a value in (0, 1)")
        self.threshold = threshold
        self.add_state("hits", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, scores: torch.Tensor) -> None:
        self.hits += (scores.detach() >= self.threshold).sum()
        self.total += scores.numel()

    def compute(self) -> torch.Tensor:
        return (self.hits / self.total).float()


class MeanCosineSimilarity(Metric):
    """Mean cosine similarity of paired vectors; ``update(a, b, valid=None)`` counts only ``valid`` rows."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        sims = F.cosine_similarity(a.detach().flatten(1).double(), b.detach().flatten(1).double(), dim=1)
        if valid is not None:
            sims = sims[valid.bool()]
        self.total += sims.sum()
        self.count += sims.numel()

    def compute(self) -> torch.Tensor:
        return (self.total / self.count).float()


class PerceptualDistance(Metric):
    """Mean ``distance(original, counterfactual)`` for a module such as LPIPS; ``name`` says which distance."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, distance: nn.Module, **kwargs) -> None:
        super().__init__(**kwargs)
        self.distance = distance
        self.name = getattr(distance, "name", type(distance).__name__)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    @torch.no_grad()
    def update(self, originals: torch.Tensor, counterfactuals: torch.Tensor) -> None:
        values = self.distance(originals.float(), counterfactuals.float())
        self.total += values.double().sum()
        self.count += values.numel()

    def compute(self) -> torch.Tensor:
        return (self.total / self.count).float()


class TimePerImage(Metric):
    """Seconds per processed image; ``update(seconds, images)`` adds a batch's time and image count."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("seconds", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("images", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, seconds: float, images: int) -> None:
        self.seconds += float(seconds)
        self.images += int(images)

    def compute(self) -> torch.Tensor:
        return (self.seconds / self.images.clamp(min=1)).float()


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
    from torchmetrics.image.fid import FrechetInceptionDistance
    from torchmetrics.image.kid import KernelInceptionDistance

    from nemo_train.competency.perceptual import realism_features

    feature, space, path = realism_features(classifier, image_shape, inception_weights)
    extra = {"feature_extractor_weights_path": path} if path else {}
    fid = FrechetInceptionDistance(feature=feature, normalize=True, reset_real_features=False, **extra)
    kid = KernelInceptionDistance(
        feature=feature, normalize=True, reset_real_features=False, subset_size=kid_subset_size, **extra
    )
    return {f"fid[{space}]": fid, f"kid[{space}]": kid}
