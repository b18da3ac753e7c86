"""The classifiers a command analyses, behind one interface: ``P(.|x)`` and features (built by the specs of
:mod:`nemo_train.models.specs`).

A :class:`Target` takes images ``float[B, 3, H, W]`` in ``[0, 1]`` (any size; it resizes and normalises
inside) and gives class probabilities over *its benchmark's* classes and pooled features for retrieval.
Three kinds:

* :class:`ClassifierTarget` — a module with ``forward -> logits`` and ``features`` (our trained
  :class:`~nemo_train.models.ClassifierModule` checkpoints, :func:`load_checkpoint_target`);
* :class:`TimmTarget` — any timm ImageNet model by name (``vit_base_patch16_224.augreg2_in21k_ft_in1k``);
* :class:`~nemo_train.models.zero_shot.ZeroShotTarget` — CLIP / SigLIP through transformers, one text prompt per
  class (``"a photo of a {}"``), with *prompt intervention* (its own module).

ImageNet-trained targets evaluated on ImageNet-R / ObjectNet / ImageNet-D see a :class:`ClassMapping`
from the 1,000 ImageNet outputs to the benchmark's classes: a class is a *set* of ImageNet ids, its
probability is the sum over the set (after renormalising over the union of all sets, which for
ImageNet-R's 200 singletons equals masking the logits), and a prediction counts as class ``k`` when the
top-1 ImageNet id lies in ``k``'s set ("any mapped id counts").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import timm
import torch
import torch.nn.functional as F
from timm.data import ImageNetInfo
from torch import nn

from nemo_train.errors import UserInputError
from nemo_train.models.class_mapping import ClassMapping
from nemo_train.models.loading import load_classifier

__all__ = ["ClassMapping", "ClassifierTarget", "Target", "TimmTarget", "load_checkpoint_target"]


class Target(nn.Module):
    """A classifier under evaluation: ``predict_proba`` over ``class_names`` and ``features`` for retrieval."""

    class_names: list[str]

    def logits(self, images: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (differentiable; Grad-CAM calls this)."""
        return self.logits(images)

    @torch.no_grad()
    def predict_proba(self, images: torch.Tensor) -> torch.Tensor:
        """``P(.|x)`` ``[B, K]`` for images in ``[0, 1]``."""
        return self.logits(images).float().softmax(-1)

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """Predicted class ``[B]``."""
        return self.predict_proba(images).argmax(-1)

    def features(self, images: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    @torch.no_grad()
    def predict_and_features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(predict(images), features(images))``; a target that can reads both from one forward pass."""
        return self.predict(images), self.features(images)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def _check_images(images: torch.Tensor) -> torch.Tensor:
    if images.ndim != 4 or images.shape[1] != 3:
        raise UserInputError(f"expected images of shape [B, 3, H, W] in [0, 1], got {list(images.shape)}")
    return images


class ClassifierTarget(Target):
    """Wrap a module with ``forward(images) -> logits`` and ``features(images)`` (e.g. a ``ClassifierModule``).

    ``gradcam_layer`` names the module used by Grad-CAM (default: the last ``Conv2d``).
    """

    def __init__(self, module: nn.Module, class_names: Sequence[str], image_size: int | None = None) -> None:
        super().__init__()
        self.module = module.eval()
        self.class_names = list(class_names)
        self.image_size = image_size

    def _resize(self, images: torch.Tensor) -> torch.Tensor:
        images = _check_images(images).to(self.device)
        if self.image_size and images.shape[-1] != self.image_size:
            images = F.interpolate(
                images, size=(self.image_size, self.image_size), mode="bilinear", antialias=True, align_corners=False
            )
        return images

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.module(self._resize(images))

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.module.features(self._resize(images))

    @torch.no_grad()
    def predict_and_features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass for both, when the module wraps a timm model (``ClassifierModule``): its logits are the
        classifier applied to the pooled pre-logit features, the same operations as :meth:`predict` and
        :meth:`features` run separately."""
        model, normalize = getattr(self.module, "model", None), getattr(self.module, "normalize", None)
        if normalize is None or not all(hasattr(model, f) for f in ("forward_features", "forward_head")):
            return super().predict_and_features(images)
        pooled = model.forward_head(model.forward_features(normalize(self._resize(images))), pre_logits=True)
        logits = model.get_classifier()(pooled)
        return logits.float().softmax(-1).argmax(-1), pooled

    def gradcam_layer(self) -> nn.Module:
        """The last convolution of the wrapped model (Grad-CAM's default target layer)."""
        convs = [m for m in self.module.modules() if isinstance(m, nn.Conv2d)]
        if not convs:
            raise UserInputError("the target has no Conv2d layer for Grad-CAM; pass cam_layer explicitly")
        return convs[-1]


def load_checkpoint_target(path: str | Path, class_names: Sequence[str] | None = None) -> ClassifierTarget:
    """A :class:`ClassifierTarget` from a ``ClassifierModule`` checkpoint of ``nemo-train fit``
    (:func:`~nemo_train.models.loading.load_classifier`: a missing or damaged file is a one-line error)."""
    module = load_classifier(path)
    n = module.hparams.num_classes
    if class_names is not None and len(class_names) != n:
        raise UserInputError(
            f"classifier {str(path)!r} has {n} classes but the data have {len(class_names)}; "
            "pass a classifier of this data's classes (`nemo-train fit` trains one)"
        )
    return ClassifierTarget(module, list(class_names) if class_names is not None else [str(i) for i in range(n)])


class TimmTarget(Target):
    """A timm model by name (ImageNet-1k head), optionally mapped onto a benchmark's classes.

    Args:
        model_name: timm name, e.g. ``vit_base_patch16_224.augreg2_in21k_ft_in1k``.
        mapping: benchmark classes as ImageNet id sets; ``None`` keeps the model's own classes.
        pretrained: load hub weights (``False`` gives a random model of the same architecture, for tests).
        model_kwargs: extra ``timm.create_model`` arguments (tiny test configs).
        weights_file: a local ``.safetensors`` / ``.pth`` state dict to load instead of the hub weights.
    """

    def __init__(
        self,
        model_name: str,
        mapping: ClassMapping | None = None,
        pretrained: bool = True,
        model_kwargs: Mapping | None = None,
        weights_file: str | Path | None = None,
    ) -> None:
        super().__init__()
        if model_name.split(".")[0] not in timm.list_models():
            raise UserInputError(f"unknown timm model {model_name!r}; expected a name from timm.list_models()")
        kwargs = dict(model_kwargs or {})
        if weights_file is not None:
            if not Path(weights_file).is_file():
                raise UserInputError(f"timm weights file {str(weights_file)!r} does not exist")
            kwargs["pretrained_cfg_overlay"] = {"file": str(weights_file)}
        try:
            self.model = timm.create_model(model_name, pretrained=pretrained or weights_file is not None, **kwargs)
        except (OSError, RuntimeError, ValueError) as err:  # offline hub, missing file, wrong state dict
            source = repr(str(weights_file)) if weights_file is not None else "the hub"
            raise UserInputError(
                f"cannot load weights of timm model {model_name!r} from {source} ({type(err).__name__}: "
                f"{str(err).splitlines()[0][:150] if str(err) else ''}); give weights_file or pretrained: false"
            ) from None
        self.model.eval()
        cfg = timm.data.resolve_data_config({}, model=self.model)
        self.input_size = tuple(cfg["input_size"][1:])
        patch_embed_size = getattr(getattr(self.model, "patch_embed", None), "img_size", None)
        if patch_embed_size is not None:  # a ViT built with another img_size than its pretrained config
            self.input_size = tuple(patch_embed_size)
        self.register_buffer("mean", torch.tensor(cfg["mean"]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg["std"]).view(1, 3, 1, 1), persistent=False)
        self.mapping = mapping
        n = self.model.num_classes
        if mapping is not None and mapping.member.shape[1] != n:
            raise UserInputError(f"class mapping covers {mapping.member.shape[1]} outputs but {model_name!r} has {n}")
        self.class_names = mapping.class_names if mapping is not None else _imagenet_names(n)

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        images = _check_images(images).to(self.device)
        if tuple(images.shape[-2:]) != self.input_size:
            images = F.interpolate(images, size=self.input_size, mode="bilinear", antialias=True, align_corners=False)
        return (images - self.mean) / self.std

    def raw_logits(self, images: torch.Tensor) -> torch.Tensor:
        """Logits over the model's own (ImageNet) classes."""
        return self.model(self._prepare(images))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        raw = self.raw_logits(images)
        return raw if self.mapping is None else self.mapping.probs(raw).clamp_min(1e-12).log()

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        raw = self.raw_logits(images)
        return raw.argmax(-1) if self.mapping is None else self.mapping.predict(raw)

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(self.model.forward_features(self._prepare(images)), pre_logits=True)

    def gradcam_layer(self) -> nn.Module:
        """Grad-CAM layer: the last block's first norm for ViTs, else the last convolution."""
        if hasattr(self.model, "blocks") and hasattr(self.model.blocks[-1], "norm1"):
            return self.model.blocks[-1].norm1
        return ClassifierTarget.gradcam_layer(SimpleNamespace(module=self.model))

    def gradcam_reshape(self):
        """Token -> map reshape for ViTs (prefix tokens dropped), ``None`` for CNNs."""
        if not hasattr(self.model, "blocks"):
            return None
        prefix = getattr(self.model, "num_prefix_tokens", 1)
        return tokens_to_map(prefix)


def tokens_to_map(prefix: int):
    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens[:, prefix:]
        side = int(round(tokens.shape[1] ** 0.5))
        return tokens.reshape(tokens.shape[0], side, side, tokens.shape[2]).permute(0, 3, 1, 2)

    return reshape


def _imagenet_names(n: int) -> list[str]:
    if n != 1000:
        return [str(i) for i in range(n)]
    info = ImageNetInfo()
    return [info.index_to_description(i).split(",")[0] for i in range(n)]
