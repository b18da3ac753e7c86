"""High-competency counterfactual images: the generator interface, Reco and LNN
(competency-counterfactuals paper, Sec. 3.1).

Every generator is built from its own typed options (``class_path`` / ``init_args`` in a config), is
bound to a fitted :class:`~nemo_train.competency.parce.PaRCE` estimator with
:meth:`~CounterfactualGenerator.bind` and then turns a batch of images into counterfactuals whose
competency should reach the threshold:

* **IGD**, **FGD**, **LGD** — Adam searches, in :mod:`nemo_train.competency.gradient_counterfactuals`.
* **Reco** — the autoencoder's reconstruction ``h(g(x))``.
* **LNN** — ``h(z_nn)`` with ``z_nn`` the latent of the nearest (L1 by default) high-competency held-out image.

Images already at the threshold are returned unchanged. Time is measured around generation only (device
synchronised) and divided by the number of images actually processed.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from nemo_train.competency.parce import PaRCE, check_threshold
from nemo_train.errors import UserInputError

#: Distances between vectors (features, latents): negative cosine similarity, L1 or L2 norm of the difference.
VectorDistance = Literal["cos", "l1", "l2"]
#: ``per_image``: an image that reaches the threshold is frozen and leaves the batch; ``batch`` (the
#: reference code's rule): every image is updated until all pass.
Stopping = Literal["per_image", "batch"]
#: ``score``: minimise ``-score`` (the paper); ``log_score``: minimise ``-log score`` (same optimum, a gradient
#: that survives where the score of a far out-of-distribution image has underflowed to 0).
Objective = Literal["score", "log_score"]


def vector_distance(a: torch.Tensor, b: torch.Tensor, metric: VectorDistance) -> torch.Tensor:
    """Per-row distance ``[B]``: ``cos`` = negative cosine similarity, ``l1`` / ``l2`` = norms of ``a - b``."""
    if metric == "cos":
        return -F.cosine_similarity(a.flatten(1), b.flatten(1), dim=1)
    return torch.linalg.vector_norm((a - b).flatten(1), ord=1 if metric == "l1" else 2, dim=1)


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

    Built from its options alone; :meth:`bind` attaches the fitted estimator (and :meth:`fit` gives it the
    held-out images, for methods that need them). ``generator(images) -> CounterfactualResult``;
    ``generate(images)`` is the bare batch map.

    Args:
        threshold: competency threshold (defaults to the estimator's).
    """

    name: ClassVar[str]

    def __init__(self, threshold: float | None = None) -> None:
        self._threshold = None if threshold is None else check_threshold(threshold)
        self.estimator: PaRCE | None = None

    def bind(self, estimator: PaRCE) -> CounterfactualGenerator:
        """Attach the fitted PaRCE estimator whose competency the counterfactuals should reach; returns ``self``."""
        if not isinstance(estimator, PaRCE):
            raise UserInputError(f"expected a fitted PaRCE estimator, got {type(estimator).__name__}")
        estimator._require_fitted()
        self.estimator = estimator.eval()
        return self

    @classmethod
    def class_path(cls) -> str:
        """``module.Class``, as a config names this generator."""
        return f"{cls.__module__}.{cls.__qualname__}"

    def options(self) -> dict:
        """The ``init_args`` this generator was built with (what a config would set): the parameters of its
        ``__init__`` and, where that passes ``**kwargs`` on, of its base classes' (as jsonargparse reads them)."""
        names: list[str] = []
        for cls in type(self).__mro__:
            if "__init__" not in vars(cls):
                continue
            params = inspect.signature(vars(cls)["__init__"]).parameters.values()
            names += [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in names]
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return {
            name: getattr(self, f"_{name}") if hasattr(self, f"_{name}") else getattr(self, name)
            for name in names
            if name not in ("self", "progress")
        }

    def fit(self, holdout_images: torch.Tensor) -> CounterfactualGenerator:
        """Learn from held-out in-distribution images (only :class:`LatentNearestNeighbor` needs them)."""
        return self

    @property
    def threshold(self) -> float:
        """The competency to reach: this generator's own threshold, else the estimator's."""
        if self._threshold is not None:
            return self._threshold
        return check_threshold(self._bound().threshold)

    def _bound(self) -> PaRCE:
        if self.estimator is None:
            raise UserInputError(f"{self.name} has no estimator; call bind(estimator) first")
        return self.estimator

    @property
    def device(self) -> torch.device:
        return self._bound().class_means.device

    @abstractmethod
    def generate(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Counterfactuals ``[B, C, H, W]`` and iterations ``[B]`` for images on the estimator's device."""

    def __call__(self, images: torch.Tensor) -> CounterfactualResult:
        self._bound()
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
        distance: ``l1`` (paper default), ``l2`` or ``cos``.
        threshold: competency threshold (defaults to the estimator's).
    """

    name = "LNN"

    def __init__(self, distance: VectorDistance = "l1", threshold: float | None = None) -> None:
        super().__init__(threshold)
        self.distance = distance
        self.bank: torch.Tensor | None = None

    @torch.no_grad()
    def fit(self, images: torch.Tensor, batch_size: int = 256) -> LatentNearestNeighbor:
        """Keep the latents of the held-out ``images`` whose competency reaches the threshold."""
        self._bound()
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
