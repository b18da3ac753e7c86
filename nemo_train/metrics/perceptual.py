"""Perceptual distance and realism feature extractors, with honest names when weights are missing.

LPIPS (the ``lpips`` package) needs torchvision's ImageNet AlexNet weights, and the Inception FID/KID of
torchmetrics needs torch-fidelity's Inception weights; both are normally downloaded at run time. Here they
are loaded from a given path or the torch hub cache when present. Otherwise we fall back to a named
alternative and the returned name says which one was computed:

* ``lpips[alex]`` — LPIPS with AlexNet; fallback ``1-ssim`` — one minus SSIM (torchmetrics), a
  differentiable structural distance that needs no weights.
* ``fid[inception]`` / ``kid[inception]`` — Inception-v3 pool features; fallback ``fid[classifier]`` /
  ``kid[classifier]`` — the pooled features of the classifier under study.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.functional.image import structural_similarity_index_measure

ALEXNET_FILE = "alexnet-owt-7be5be79.pth"
INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
LPIPS_MIN_SIZE = 64  # AlexNet's pooling stages need at least ~64 px; smaller images are upsampled


def hub_checkpoint(filename: str) -> Path | None:
    """Path of ``filename`` in the torch hub cache (``$TORCH_HOME/hub/checkpoints``), or ``None``."""
    path = Path(torch.hub.get_dir()) / "checkpoints" / filename
    return path if path.is_file() else None


class LPIPSDistance(nn.Module):
    """LPIPS (AlexNet) between images in ``[0, 1]``; ``forward(x, y) -> [B]``; ``name = "lpips[alex]"``.

    ``alexnet_weights`` is a torchvision AlexNet state dict file (``alexnet-owt-7be5be79.pth``). Images
    smaller than 64 px are upsampled bilinearly first, since AlexNet's pooling needs that much.
    """

    name = "lpips[alex]"

    def __init__(self, alexnet_weights: str | Path) -> None:
        super().__init__()
        import lpips  # lazy: an optional dependency, only needed when AlexNet weights are present

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lpips = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)
        state = torch.load(str(alexnet_weights), map_location="cpu", weights_only=True)
        backbone = self.lpips.net
        for slice_name in ("slice1", "slice2", "slice3", "slice4", "slice5"):
            for index, layer in getattr(backbone, slice_name).named_children():
                if isinstance(layer, nn.Conv2d):
                    layer.weight.data.copy_(state[f"features.{index}.weight"])
                    layer.bias.data.copy_(state[f"features.{index}.bias"])
        self.lpips.eval().requires_grad_(False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if min(x.shape[-2:]) < LPIPS_MIN_SIZE:
            size = (max(LPIPS_MIN_SIZE, x.shape[-2]), max(LPIPS_MIN_SIZE, x.shape[-1]))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
            y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
        return self.lpips(2 * x - 1, 2 * y - 1).flatten()


class SSIMDistance(nn.Module):
    """``1 - SSIM`` per image pair in ``[0, 1]`` (torchmetrics, Gaussian window 7); ``name = "1-ssim"``."""

    name = "1-ssim"

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        kernel = 7 if min(x.shape[-2:]) >= 7 else 3
        ssim = structural_similarity_index_measure(x, y, data_range=1.0, reduction="none", kernel_size=kernel)
        return 1.0 - ssim


def perceptual_distance(alexnet_weights: str | Path | None = None) -> nn.Module:
    """LPIPS when AlexNet weights are at ``alexnet_weights`` or in the hub cache, else ``1-ssim`` (with a warning).

    The returned module has a ``name`` attribute saying which distance it computes.
    """
    path = Path(alexnet_weights) if alexnet_weights else hub_checkpoint(ALEXNET_FILE)
    if path is not None and path.is_file():
        return LPIPSDistance(path)
    _warn_once(
        "AlexNet weights for LPIPS not found (torch hub cache or alexnet_weights); reporting '1-ssim' instead of 'lpips[alex]'"
    )
    return SSIMDistance()


@functools.cache
def _warn_once(message: str) -> None:
    """Warn with ``message`` the first time only (a run builds the perceptual distance more than once)."""
    warnings.warn(message, stacklevel=3)


class ClassifierFeatures(nn.Module):
    """Wraps a classifier's ``features(images) -> [B, D]`` as a torchmetrics FID/KID feature module."""

    def __init__(self, classifier: nn.Module, num_features: int) -> None:
        super().__init__()
        self.classifier = classifier
        self.num_features = num_features

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier.features(images.float())


def _has_torch_fidelity() -> bool:
    try:
        import torch_fidelity  # noqa: F401  (optional: torchmetrics' Inception FID / KID need it)
    except ImportError:
        return False
    return True


def realism_features(
    classifier: nn.Module, image_shape: tuple[int, int, int], inception_weights: str | Path | None = None
):
    """``(feature, tag)`` for torchmetrics FID / KID: Inception (``"inception"``) when torch-fidelity and its
    weights are available, else the classifier's features (``"classifier"``). ``feature`` is an ``int``
    (Inception feature size) or a module."""
    path = Path(inception_weights) if inception_weights else hub_checkpoint(INCEPTION_FILE)
    if _has_torch_fidelity() and path is not None and path.is_file():
        return 2048, "inception", str(path)
    with torch.no_grad():
        probe = next(iter(classifier.parameters()), None)
        device = probe.device if probe is not None else torch.device("cpu")
        dim = classifier.features(torch.rand(1, *image_shape, device=device)).shape[-1]
    return ClassifierFeatures(classifier, dim), "classifier", None
