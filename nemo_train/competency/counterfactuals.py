"""High-competency counterfactual images (paper 004, Sec. 3.1): IGD, FGD, Reco, LGD and LNN.

Every generator takes a fitted :class:`~nemo_train.competency.parce.PaRCE` estimator and turns a batch of
images into counterfactuals whose competency should reach the threshold:

* **IGD** — Adam on the pixels, loss ``-score(x') + gamma * d(x, x')`` with ``d`` = LPIPS by default.
* **FGD** — Adam on the pixels, loss ``-score(x') + gamma * d(f(x), f(x'))``, ``f`` the classifier's
  features, ``d`` = negative cosine similarity by default.
* **Reco** — the autoencoder's reconstruction ``h(g(x))``.
* **LGD** — Adam on the autoencoder latent, loss ``-score(h(z')) + gamma * d(z, z')``, image ``h(z')``.
* **LNN** — ``h(z_nn)`` with ``z_nn`` the latent of the nearest (L1 by default) high-competency held-out image.

Differences from the authors' code are options, not silent choices. Defaults: ``stopping="per_image"``
(an image that reaches the threshold is frozen and leaves the batch; the reference ``"batch"`` keeps
updating every image until all pass), ``clamp_pixels=True`` (the reference never clamps),
``objective="score"`` as in the paper (``"log_score"`` minimises ``-log score`` instead: same optimum, but
the gradient does not vanish for images far out of distribution, whose score underflows to exactly 0
because ``1 - Phi(t)`` does for ``t`` beyond about 8), the loss is a sum over images (each image gets the gradient it would get alone; Adam makes the reference's mean almost
equivalent). Images already at the threshold are returned unchanged. Time is measured around generation
only (device synchronised) and divided by the number of images actually processed.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from nemo_train.competency.parce import PaRCE, check_threshold
from nemo_train.errors import UserInputError

VECTOR_DISTANCES = ("cos", "l1", "l2")
STOPPING_RULES = ("per_image", "batch")
OBJECTIVES = ("score", "log_score")


def vector_distance(a: torch.Tensor, b: torch.Tensor, metric: str) -> torch.Tensor:
    """Per-row distance ``[B]``: ``cos`` = negative cosine similarity, ``l1`` / ``l2`` = norms of ``a - b``."""
    if metric == "cos":
        return -F.cosine_similarity(a.flatten(1), b.flatten(1), dim=1)
    if metric in ("l1", "l2"):
        return torch.linalg.vector_norm((a - b).flatten(1), ord=1 if metric == "l1" else 2, dim=1)
    raise UserInputError(f"unknown distance {metric!r}; expected one of {list(VECTOR_DISTANCES)}")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class CounterfactualResult:
    """Counterfactuals of one batch and how they were obtained.

    ``images`` ``[B, C, H, W]``; ``scores`` their competency; ``success`` score at least the threshold;
    ``iterations`` optimisation steps taken per image (0 for single-shot methods and already-competent
    images); ``seconds`` wall time of the generation; ``processed`` number of images that needed work.
    """

    images: torch.Tensor
    scores: torch.Tensor
    success: torch.Tensor
    iterations: torch.Tensor
    seconds: float
    processed: int

    @property
    def seconds_per_image(self) -> float:
        """Generation time divided by the number of images that were processed (not by the whole batch)."""
        return self.seconds / max(self.processed, 1)


class CounterfactualGenerator(ABC):
    """A method that maps low-competency images to high-competency counterfactuals.

    ``generator(images) -> CounterfactualResult``; ``generate(images) -> Tensor`` is the bare batch map.
    """

    name: ClassVar[str]

    def __init__(self, estimator: PaRCE, threshold: float | None = None) -> None:
        if not isinstance(estimator, PaRCE):
            raise UserInputError(f"expected a fitted PaRCE estimator, got {type(estimator).__name__}")
        estimator._require_fitted()
        self.estimator = estimator.eval()
        self.threshold = check_threshold(estimator.threshold if threshold is None else threshold)

    @property
    def device(self) -> torch.device:
        return self.estimator.class_means.device

    @abstractmethod
    def generate(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Counterfactuals ``[B, C, H, W]`` and iterations ``[B]`` for images on the estimator's device."""

    def __call__(self, images: torch.Tensor) -> CounterfactualResult:
        images = images.to(self.device, torch.float32)
        self.estimator.autoencoder.check_images(images)
        with torch.no_grad():
            already = self.estimator(images) >= self.threshold
        todo = torch.nonzero(~already).flatten()
        out = images.clone()
        iterations = torch.zeros(len(images), dtype=torch.long, device=self.device)
        _synchronize(self.device)
        start = time.perf_counter()
        if len(todo):
            generated, steps = self.generate(images[todo])
            out[todo] = generated.detach()
            iterations[todo] = steps
        _synchronize(self.device)
        seconds = time.perf_counter() - start
        with torch.no_grad():
            scores = self.estimator(out)
        return CounterfactualResult(out, scores, scores >= self.threshold, iterations, seconds, len(todo))


class ReconstructionCounterfactual(CounterfactualGenerator):
    """Reco: the counterfactual is the competency autoencoder's reconstruction ``h(g(x))``."""

    name = "Reco"

    @torch.no_grad()
    def generate(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.estimator.autoencoder(images), torch.zeros(len(images), dtype=torch.long, device=images.device)


class LatentNearestNeighbor(CounterfactualGenerator):
    """LNN: decode the latent of the nearest high-competency held-out image (``fit`` builds that bank).

    Args:
        estimator: fitted PaRCE estimator.
        threshold: competency threshold (defaults to the estimator's).
        distance: ``l1`` (paper default), ``l2`` or ``cos``.
    """

    name = "LNN"

    def __init__(self, estimator: PaRCE, threshold: float | None = None, distance: str = "l1") -> None:
        super().__init__(estimator, threshold)
        if distance not in VECTOR_DISTANCES:
            raise UserInputError(f"unknown LNN distance {distance!r}; expected one of {list(VECTOR_DISTANCES)}")
        self.distance = distance
        self.bank: torch.Tensor | None = None

    @torch.no_grad()
    def fit(self, images: torch.Tensor, batch_size: int = 256) -> LatentNearestNeighbor:
        """Keep the latents of the held-out ``images`` whose competency reaches the threshold."""
        latents = []
        for chunk in images.split(batch_size):
            chunk = chunk.to(self.device, torch.float32)
            keep = self.estimator(chunk) >= self.threshold
            latents.append(self.estimator.autoencoder.encode(chunk[keep]))
        bank = torch.cat(latents)
        if len(bank) == 0:
            raise UserInputError(f"no held-out image reaches competency {self.threshold}; LNN has no neighbour to use")
        self.bank = bank
        return self

    @torch.no_grad()
    def generate(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.bank is None:
            raise UserInputError("LNN has no latent bank; call fit(holdout_images) first")
        z = self.estimator.autoencoder.encode(images)
        if self.distance == "cos":
            nearest = (F.normalize(z, dim=1) @ F.normalize(self.bank, dim=1).T).argmax(1)
        else:
            nearest = torch.cdist(z, self.bank, p=1.0 if self.distance == "l1" else 2.0).argmin(1)
        return self.estimator.autoencoder.decode(self.bank[nearest]), torch.zeros(
            len(images), dtype=torch.long, device=images.device
        )


class GradientCounterfactual(CounterfactualGenerator):
    """Shared Adam loop of IGD, FGD and LGD: minimise ``-score(image(p)) + gamma * penalty`` over ``p``.

    Args:
        estimator: fitted PaRCE estimator.
        threshold: competency threshold (defaults to the estimator's).
        lr: Adam learning rate (paper: 1e-3).
        gamma: weight of the distance term (paper: 0.1).
        max_iter: maximum number of steps (paper: 100).
        stopping: ``per_image`` (finished images frozen) or ``batch`` (reference: stop when all pass).
        clamp_pixels: keep optimised pixels in ``[0, 1]`` after every step (reference: no).
        objective: ``score`` (paper: minimise ``-score``) or ``log_score`` (minimise ``-log score``, whose
            gradient survives where the score has underflowed to 0).
        progress: show a tqdm bar over iterations.
    """

    def __init__(
        self,
        estimator: PaRCE,
        threshold: float | None = None,
        lr: float = 1e-3,
        gamma: float = 0.1,
        max_iter: int = 100,
        stopping: str = "per_image",
        clamp_pixels: bool = True,
        objective: str = "score",
        progress: bool = False,
    ) -> None:
        super().__init__(estimator, threshold)
        if stopping not in STOPPING_RULES:
            raise UserInputError(f"unknown stopping rule {stopping!r}; expected one of {list(STOPPING_RULES)}")
        if objective not in OBJECTIVES:
            raise UserInputError(f"unknown objective {objective!r}; expected one of {list(OBJECTIVES)}")
        if lr <= 0 or max_iter < 1 or gamma < 0:
            raise UserInputError(
                f"lr={lr}, max_iter={max_iter}, gamma={gamma}; expected lr > 0, max_iter >= 1, gamma >= 0"
            )
        self.lr, self.gamma, self.max_iter = lr, gamma, max_iter
        self.stopping, self.clamp_pixels, self.objective, self.progress = stopping, clamp_pixels, objective, progress

    optimises_pixels: ClassVar[bool] = True

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
        for step in tqdm(range(self.max_iter + 1), desc=f"{self.name}", disable=not self.progress, leave=False):
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
            if self.optimises_pixels and self.clamp_pixels:
                with torch.no_grad():
                    param.clamp_(0.0, 1.0)
        return result, iterations


class ImageGradientDescent(GradientCounterfactual):
    """IGD: Adam on the pixels with a perceptual penalty ``gamma * d(x, x')`` (``d`` from
    :func:`~nemo_train.competency.perceptual.perceptual_distance`, or ``l1`` / ``l2`` mean pixel distances)."""

    name = "IGD"

    def __init__(
        self, estimator: PaRCE, distance: nn.Module | str = "lpips", alexnet_weights: str | None = None, **kwargs
    ) -> None:
        super().__init__(estimator, **kwargs)
        if isinstance(distance, str):
            if distance == "lpips":
                from nemo_train.competency.perceptual import perceptual_distance

                distance = perceptual_distance(alexnet_weights)
            elif distance not in ("l1", "l2"):
                raise UserInputError(f"unknown IGD distance {distance!r}; expected 'lpips', 'l1' or 'l2'")
        self.distance = distance.to(self.device) if isinstance(distance, nn.Module) else distance
        self.distance_name = getattr(distance, "name", distance)

    def _pixel_distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if isinstance(self.distance, str):
            diff = (x - y).flatten(1)
            return diff.abs().mean(1) if self.distance == "l1" else diff.pow(2).mean(1)
        return self.distance(x, y)

    def start(self, images):
        return images, (lambda p: p), (lambda p, x, index: self._pixel_distance(images[index], x))


class FeatureGradientDescent(GradientCounterfactual):
    """FGD: Adam on the pixels with ``gamma * d(f(x), f(x'))`` on the classifier features (``cos``, ``l1``, ``l2``)."""

    name = "FGD"

    def __init__(self, estimator: PaRCE, distance: str = "cos", **kwargs) -> None:
        super().__init__(estimator, **kwargs)
        if distance not in VECTOR_DISTANCES:
            raise UserInputError(f"unknown FGD distance {distance!r}; expected one of {list(VECTOR_DISTANCES)}")
        self.distance = distance

    def start(self, images):
        features = self.estimator.classifier.features
        with torch.no_grad():
            original = features(images)
        return images, (lambda p: p), (lambda p, x, index: vector_distance(original[index], features(x), self.distance))


class LatentGradientDescent(GradientCounterfactual):
    """LGD: Adam on the autoencoder latent ``z'`` with ``gamma * d(z, z')`` (``cos``, ``l1``, ``l2``); image ``h(z')``."""

    name = "LGD"
    optimises_pixels = False

    def __init__(self, estimator: PaRCE, distance: str = "cos", **kwargs) -> None:
        super().__init__(estimator, **kwargs)
        if distance not in VECTOR_DISTANCES:
            raise UserInputError(f"unknown LGD distance {distance!r}; expected one of {list(VECTOR_DISTANCES)}")
        self.distance = distance

    def start(self, images):
        autoencoder = self.estimator.autoencoder
        with torch.no_grad():
            z = autoencoder.encode(images)
        return z, autoencoder.decode, (lambda p, x, index: vector_distance(z[index], p, self.distance))


METHODS: dict[str, type[CounterfactualGenerator]] = {
    "IGD": ImageGradientDescent,
    "FGD": FeatureGradientDescent,
    "Reco": ReconstructionCounterfactual,
    "LGD": LatentGradientDescent,
    "LNN": LatentNearestNeighbor,
}


def build_generator(name: str, estimator: PaRCE, **kwargs) -> CounterfactualGenerator:
    """Create the generator called ``name`` (``IGD``, ``FGD``, ``Reco``, ``LGD``, ``LNN``) with its options."""
    if name not in METHODS:
        raise UserInputError(f"unknown counterfactual method {name!r}; expected one of {list(METHODS)}")
    return METHODS[name](estimator, **kwargs)
