"""Gradient-based high-competency counterfactuals (competency-counterfactuals paper, Sec. 3.1): IGD, FGD and LGD.

* **IGD** — Adam on the pixels, loss ``-score(x') + gamma * d(x, x')`` with ``d`` = LPIPS by default.
* **FGD** — Adam on the pixels, loss ``-score(x') + gamma * d(f(x), f(x'))``, ``f`` the classifier's
  features, ``d`` = negative cosine similarity by default.
* **LGD** — Adam on the autoencoder latent, loss ``-score(h(z')) + gamma * d(z, z')``, image ``h(z')``.

Differences from the authors' code are options, not silent choices. Defaults: ``stopping="per_image"``
(an image that reaches the threshold is frozen and leaves the batch; the reference ``"batch"`` keeps
updating every image until all pass), ``clamp_pixels=True`` (the reference never clamps),
``objective="score"`` as in the paper (``"log_score"`` minimises ``-log score`` instead: same optimum, but
the gradient does not vanish for images far out of distribution, whose score underflows to exactly 0
because ``1 - Phi(t)`` does for ``t`` beyond about 8); the loss is a sum over images (each image gets the
gradient it would get alone; Adam makes the reference's mean almost equivalent).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from nemo_train.competency.counterfactuals import (
    CounterfactualGenerator,
    LatentNearestNeighbor,
    Objective,
    ReconstructionCounterfactual,
    Stopping,
    VectorDistance,
    vector_distance,
)
from nemo_train.competency.parce import PaRCE
from nemo_train.errors import UserInputError
from nemo_train.metrics.perceptual import perceptual_distance
from nemo_train.quiet import progress_bar


class GradientCounterfactual(CounterfactualGenerator):
    """Shared Adam loop of IGD, FGD and LGD: minimise ``-score(image(p)) + gamma * penalty`` over ``p``.

    Args:
        lr: Adam learning rate (paper: 1e-3).
        gamma: weight of the distance term (paper: 0.1).
        max_iter: maximum number of steps (paper: 100).
        stopping: ``per_image`` (finished images frozen) or ``batch`` (reference: stop when all pass).
        clamp_pixels: keep optimised pixels in ``[0, 1]`` after every step (reference: no).
        objective: ``score`` (paper: minimise ``-score``) or ``log_score`` (minimise ``-log score``, whose
            gradient survives where the score has underflowed to 0).
        threshold: competency threshold (defaults to the estimator's).
        progress: show a tqdm bar over iterations.
    """

    def __init__(
        self,
        lr: float = 1e-3,
        gamma: float = 0.1,
        max_iter: int = 100,
        stopping: Stopping = "per_image",
        objective: Objective = "score",
        threshold: float | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(threshold)
        if lr <= 0 or max_iter < 1 or gamma < 0:
            raise UserInputError(
                f"lr={lr}, max_iter={max_iter}, gamma={gamma}; expected lr > 0, max_iter >= 1, gamma >= 0"
            )
        self.lr, self.gamma, self.max_iter = lr, gamma, max_iter
        self.stopping, self.objective, self.progress = stopping, objective, progress

    @abstractmethod
    def start(self, images: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable]:
        """``(p0, to_image, penalty)``: initial variables ``[B, ...]``, ``p -> images`` and
        ``penalty(p, images, index) -> [b]`` where ``index`` selects the originals of the rows of ``p``."""

    def generate(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p0, to_image, penalty = self.start(images)
        param = p0.detach().clone().requires_grad_(True)
        optimizer = torch.optim.Adam([param], lr=self.lr, betas=(0.9, 0.999), eps=1e-8)
        result = images.clone()
        iterations = torch.full((len(images),), self.max_iter, dtype=torch.long, device=images.device)
        active = torch.arange(len(images), device=images.device)
        per_image = self.stopping == "per_image"
        for step in progress_bar(range(self.max_iter + 1), desc=f"{self.name}", disable=not self.progress, leave=False):
            rows = param[active] if per_image else param
            candidates = to_image(rows)
            if self.objective == "log_score":
                gains = self.estimator.log_score(candidates)
                scores = gains.exp()
            else:
                gains = scores = self.estimator(candidates)
            passed = (scores >= self.threshold).detach()
            if step == self.max_iter or (not per_image and bool(passed.all())):
                result[active] = candidates.detach()
                iterations[active] = step
                break
            if per_image and bool(passed.any()):
                done = active[passed]
                result[done] = candidates[passed].detach()
                iterations[done] = step
                keep = ~passed
                active, rows, candidates, gains = active[keep], rows[keep], candidates[keep], gains[keep]
                if len(active) == 0:
                    break
            loss = (-gains + self.gamma * penalty(rows, candidates, active)).sum()
            (grad,) = torch.autograd.grad(loss, param)
            param.grad = grad
            optimizer.step()
            self.project(param)
        return result, iterations

    def project(self, param: torch.Tensor) -> None:
        """Called after every Adam step (pixel methods clamp to ``[0, 1]`` here)."""


class PixelGradientCounterfactual(GradientCounterfactual):
    """IGD and FGD: Adam on the pixels, optionally clamped to ``[0, 1]`` after every step.

    Args:
        clamp_pixels: keep optimised pixels in ``[0, 1]`` (the reference code does not).
        lr, gamma, max_iter, stopping, objective, threshold, progress: see :class:`GradientCounterfactual`.
    """

    def __init__(self, clamp_pixels: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clamp_pixels = clamp_pixels

    def project(self, param: torch.Tensor) -> None:
        if self.clamp_pixels:
            with torch.no_grad():
                param.clamp_(0.0, 1.0)


class ImageGradientDescent(PixelGradientCounterfactual):
    """IGD: Adam on the pixels with a perceptual penalty ``gamma * d(x, x')``.

    Args:
        distance: ``lpips`` (LPIPS with AlexNet, or ``1-ssim`` when its weights are missing: see
            :func:`~nemo_train.metrics.perceptual.perceptual_distance`), or ``l1`` / ``l2`` mean pixel distances.
        alexnet_weights: AlexNet weight file for LPIPS (default: the torch hub cache).
        lr, gamma, max_iter, stopping, objective, clamp_pixels, threshold, progress: see
            :class:`PixelGradientCounterfactual`.
    """

    name = "IGD"

    def __init__(
        self, distance: Literal["lpips", "l1", "l2"] = "lpips", alexnet_weights: str | None = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.distance = distance
        self.alexnet_weights = alexnet_weights
        self.perceptual: nn.Module | None = None

    @property
    def distance_name(self) -> str:
        """The distance actually computed (``lpips[alex]``, its ``1-ssim`` fallback, ``l1`` or ``l2``)."""
        return getattr(self.perceptual, "name", self.distance)

    def bind(self, estimator: PaRCE) -> ImageGradientDescent:
        """Attach the estimator (and, for ``lpips``, build the perceptual distance on its device)."""
        super().bind(estimator)
        if self.distance == "lpips":
            self.perceptual = perceptual_distance(self.alexnet_weights).to(self.device)
        return self

    def _pixel_distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.perceptual is not None:
            return self.perceptual(x, y)
        diff = (x - y).flatten(1)
        return diff.abs().mean(1) if self.distance == "l1" else diff.pow(2).mean(1)

    def start(self, images):
        return images, (lambda p: p), (lambda p, x, index: self._pixel_distance(images[index], x))


class FeatureGradientDescent(PixelGradientCounterfactual):
    """FGD: Adam on the pixels with ``gamma * d(f(x), f(x'))`` on the classifier features.

    Args:
        distance: ``cos`` (paper), ``l1`` or ``l2``.
        lr, gamma, max_iter, stopping, objective, clamp_pixels, threshold, progress: see
            :class:`PixelGradientCounterfactual`.
    """

    name = "FGD"

    def __init__(self, distance: VectorDistance = "cos", **kwargs) -> None:
        super().__init__(**kwargs)
        self.distance = distance

    def start(self, images):
        features = self.estimator.classifier.features
        with torch.no_grad():
            original = features(images)
        return images, (lambda p: p), (lambda p, x, index: vector_distance(original[index], features(x), self.distance))


class LatentGradientDescent(GradientCounterfactual):
    """LGD: Adam on the autoencoder latent ``z'`` with ``gamma * d(z, z')``; the image is ``h(z')``.

    Args:
        distance: ``cos`` (paper), ``l1`` or ``l2``.
        lr, gamma, max_iter, stopping, objective, threshold, progress: see :class:`GradientCounterfactual`.
    """

    name = "LGD"

    def __init__(self, distance: VectorDistance = "cos", **kwargs) -> None:
        super().__init__(**kwargs)
        self.distance = distance

    def start(self, images):
        autoencoder = self.estimator.autoencoder
        with torch.no_grad():
            z = autoencoder.encode(images)
        return z, autoencoder.decode, (lambda p, x, index: vector_distance(z[index], p, self.distance))


def paper_methods() -> list[CounterfactualGenerator]:
    """The five methods with the paper's settings (Adam, lr 1e-3, gamma 0.1, 100 steps; default distances)."""
    return [
        ImageGradientDescent(),
        FeatureGradientDescent(),
        ReconstructionCounterfactual(),
        LatentGradientDescent(),
        LatentNearestNeighbor(),
    ]
