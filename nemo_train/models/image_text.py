"""One image-text encoder for every joint space of the toolkit: CLIP, SigLIP and SigLIP 2 through transformers
(a hub id or a local folder, e.g. the small CLIP that :class:`~nemo_train.models.clip.CLIPModule` exports), or a
released open_clip model.

Every consumer (the NEMO zero-shot target and ErrorRetrieval, the failure-mode search, the model-differences
zero-shot classifiers) goes through :class:`ImageTextEncoder`:

* :class:`PixelPreprocess` is the one path from our images (float ``[N, 3, H, W]`` in ``[0, 1]``) to a model's
  pixel input: a batched resize in torch (antialiased; bicubic results are clamped to ``[0, 1]``), then the
  model's mean / std. For a SigLIP 2 NaFlex model the image keeps its aspect ratio, is resized to at most
  ``max_num_patches`` patches and cut into a padded patch sequence, as transformers' SigLIP 2 processor does.
* text is tokenised as the family was trained: CLIP pads to the longest prompt; the SigLIP family pads to the
  full text length on the right, lowercases, and attends to every position (SigLIP and SigLIP 2 were trained
  without a padding mask).
* :meth:`ImageTextEncoder.logits` applies the model's own logit scale (and SigLIP's bias);
  :meth:`ImageTextEncoder.zero_shot` gives a classifier over fixed prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from torch import nn
from transformers import AutoImageProcessor, AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

from nemo_train.errors import UserInputError

Family = Literal["clip", "siglip", "siglip2", "open_clip"]
Resample = Literal["bilinear", "bicubic"]
_PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling values in processor configs


class BatchedEncoder:
    """``encode_image`` / ``encode_text`` of a joint space, computed in chunks of :attr:`batch_size` without
    gradients; a subclass encodes one chunk in ``_encode_image`` / ``_encode_text`` (L2-normalised)."""

    batch_size: int = 256

    @torch.no_grad()
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings ``[B, D]`` (on the CPU) of images in ``[0, 1]`` (any size)."""
        return torch.cat([self._encode_image(chunk).cpu() for chunk in images.split(self.batch_size)])

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text embeddings ``[T, D]`` (on the CPU)."""
        texts = list(texts)
        step = self.batch_size
        return torch.cat([self._encode_text(texts[i : i + step]).cpu() for i in range(0, len(texts), step)])

    def _encode_image(self, images: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def _encode_text(self, texts: list[str]) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class PixelPreprocess(nn.Module):
    """Images in ``[0, 1]`` -> a model's pixel inputs, batched in torch.

    Args:
        size: the model's input side (or ``(height, width)``); ``None`` for a SigLIP 2 NaFlex model, whose size
            follows each batch's aspect ratio.
        mean, std: per-channel normalisation.
        resample: ``bilinear`` or ``bicubic`` (antialiased; bicubic overshoot is clamped to ``[0, 1]``).
            Images already at the size are not resampled (an antialiased resize to the same size is the identity).
        patch_size, max_num_patches: the NaFlex patch grid (only with ``size=None``).
    """

    def __init__(
        self,
        size: int | tuple[int, int] | None,
        mean: Sequence[float],
        std: Sequence[float],
        resample: Resample = "bicubic",
        patch_size: int | None = None,
        max_num_patches: int | None = None,
    ) -> None:
        super().__init__()
        if size is None and not (patch_size and max_num_patches):
            raise UserInputError("a patch-sequence (NaFlex) preprocessing needs patch_size and max_num_patches")
        self.size = (size, size) if isinstance(size, int) else (tuple(size) if size is not None else None)
        self.resample, self.patch_size, self.max_num_patches = resample, patch_size, max_num_patches
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)
        self.last_grid: tuple[int, int] | None = None  # NaFlex patch grid of the last batch (Grad-CAM reads it)

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        if self.size is not None:
            return self.size
        from transformers.models.siglip2.image_processing_siglip2 import get_image_size_for_max_num_patches

        return get_image_size_for_max_num_patches(height, width, self.patch_size, self.max_num_patches)

    def normalised(self, images: torch.Tensor) -> torch.Tensor:
        """Resized and normalised images ``[N, 3, h, w]``."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise UserInputError(f"expected images of shape [B, 3, H, W] in [0, 1], got {list(images.shape)}")
        images = images.float().to(self.mean.device)
        size = self.target_size(*images.shape[-2:])
        if tuple(images.shape[-2:]) != tuple(size):
            images = F.interpolate(images, size=size, mode=self.resample, antialias=True, align_corners=False)
        if self.resample == "bicubic":
            images = images.clamp(0, 1)
        return (images - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model's image inputs: ``pixel_values`` (and the NaFlex patch mask and grid)."""
        pixels = self.normalised(images)
        if self.size is not None:
            return {"pixel_values": pixels}
        n, c, h, w = pixels.shape
        p, rows, cols = self.patch_size, h // self.patch_size, w // self.patch_size
        patches = pixels.reshape(n, c, rows, p, cols, p).permute(0, 2, 4, 3, 5, 1).reshape(n, rows * cols, p * p * c)
        mask = torch.zeros(n, self.max_num_patches, dtype=torch.int32, device=pixels.device)
        mask[:, : rows * cols] = 1
        self.last_grid = (rows, cols)
        return {
            "pixel_values": F.pad(patches, (0, 0, 0, self.max_num_patches - rows * cols)),
            "pixel_attention_mask": mask,
            "spatial_shapes": torch.tensor([[rows, cols]] * n, dtype=torch.long, device=pixels.device),
        }


def family_of(model: nn.Module) -> Family:
    """``siglip2`` / ``siglip`` / ``clip`` from a transformers model's class (any other module counts as CLIP)."""
    name = type(model).__name__.lower()
    return "siglip2" if "siglip2" in name else "siglip" if "siglip" in name else "clip"


def _pooled(output) -> torch.Tensor:
    """The embedding tensor (transformers returns a tensor or, in newer versions, an output object)."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def check_open_clip_name(model_name: str):
    """The ``open_clip`` module when it is installed and knows ``model_name``; otherwise a one-line error."""
    try:
        import open_clip  # optional dependency: only loaded when an open_clip model is asked for
    except ImportError:
        raise UserInputError("open_clip models need the open_clip_torch package: pip install open_clip_torch") from None
    if model_name not in open_clip.list_models():
        raise UserInputError(f"unknown Open-CLIP model {model_name!r}; see open_clip.list_models()")
    return open_clip


class ImageTextEncoder(BatchedEncoder, nn.Module):
    """A joint image-text space: normalised image / text embeddings, logits and zero-shot classifiers.

    Build one with :meth:`from_pretrained` (transformers CLIP / SigLIP / SigLIP 2) or :meth:`from_open_clip`,
    or from a model, its tokenizer and a :class:`PixelPreprocess` (models built in code).

    ``embed_image`` / ``embed_text`` work on the model's device and keep gradients (Grad-CAM);
    ``encode_image`` / ``encode_text`` (:class:`BatchedEncoder`) run in chunks without gradients and return
    CPU tensors.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        pixels: PixelPreprocess,
        family: Family | None = None,
        batch_size: int = 256,
    ) -> None:
        super().__init__()
        self.model, self.tokenizer, self.pixels = model.eval(), tokenizer, pixels
        self.family: Family = family or family_of(model)
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls, source: str, resample: Resample | None = None, image_size: int | None = None, batch_size: int = 256
    ) -> ImageTextEncoder:
        """Load a transformers CLIP / SigLIP / SigLIP 2 model, tokenizer and image processor (hub id or folder).

        ``resample`` overrides the processor's interpolation, ``image_size`` its input side (fixed-size models).
        """
        hf_logging.disable_progress_bar()  # quiet output: no weight-loading bar
        try:
            processor = AutoImageProcessor.from_pretrained(source)
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModel.from_pretrained(source)
        except (OSError, ValueError, SafetensorError) as err:  # not on the hub / offline / not image-text / damaged
            raise UserInputError(
                f"cannot load image-text model {source!r} ({type(err).__name__}: {str(err).splitlines()[0][:150]}); "
                "expected a hub id or a local folder with a CLIP / SigLIP / SigLIP 2 model and its processor"
            ) from None
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise UserInputError(f"{source!r} is a {type(model).__name__}, not an image-text (CLIP / SigLIP) model")
        resample = resample or _PIL_RESAMPLE.get(int(getattr(processor, "resample", 3) or 3), "bicubic")
        mean, std = processor.image_mean, processor.image_std
        if family_of(model) == "siglip2":
            pixels = PixelPreprocess(
                None, mean, std, resample, patch_size=processor.patch_size, max_num_patches=processor.max_num_patches
            )
        else:
            size = processor.size
            pixels = PixelPreprocess(image_size or size.get("shortest_edge") or size.get("height"), mean, std, resample)
        return cls(model, tokenizer, pixels, batch_size=batch_size)

    @classmethod
    def from_open_clip(
        cls, model_name: str, pretrained: str | None = None, device: str = "cpu", batch_size: int = 256
    ) -> ImageTextEncoder:
        """A released open_clip model by name and pretrained tag (or a local weights file as ``pretrained``)."""
        open_clip = check_open_clip_name(model_name)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(model_name, pretrained=pretrained)
        except (OSError, RuntimeError, ValueError, SafetensorError) as err:  # offline, unknown tag, damaged file
            raise UserInputError(
                f"cannot load Open-CLIP weights {model_name!r} / {pretrained!r} "
                f"({type(err).__name__}: {(str(err).splitlines() or [''])[0][:150]}); expected a pretrained tag "
                "the hub serves (see open_clip.list_pretrained()) or a local weights file"
            ) from None
        size = model.visual.image_size
        normalize = next(t for t in preprocess.transforms if type(t).__name__ == "Normalize")
        resample = getattr(model.visual, "preprocess_cfg", {}).get("interpolation", "bicubic")
        pixels = PixelPreprocess(size, normalize.mean, normalize.std, resample if resample == "bilinear" else "bicubic")
        encoder = cls(model, open_clip.get_tokenizer(model_name), pixels, family="open_clip", batch_size=batch_size)
        return encoder.to(device)

    @property
    def device(self) -> torch.device:
        return self.pixels.mean.device

    @property
    def is_siglip(self) -> bool:
        return self.family in ("siglip", "siglip2")

    # ----------------------------------------------------------------- embeddings
    def tokens(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The text tower's inputs, tokenised as the family was trained (see the module notes)."""
        texts = list(texts)
        if self.family == "open_clip":
            return {"text": self.tokenizer(texts).to(self.device)}
        limit = getattr(self.tokenizer, "model_max_length", None)
        positions = getattr(
            getattr(getattr(self.model, "config", None), "text_config", None), "max_position_embeddings", None
        )
        max_length = min(limit, positions) if limit and positions else limit or positions
        if self.is_siglip:
            kwargs = dict(padding="max_length", padding_side="right")
            texts = [text.lower() for text in texts]
        else:
            kwargs = dict(padding=True)
        tok = self.tokenizer(texts, truncation=True, max_length=max_length, return_tensors="pt", **kwargs)
        keep = ("input_ids",) if self.is_siglip else ("input_ids", "attention_mask")
        return {k: tok[k].to(self.device) for k in keep if k in tok}

    def embed_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings ``[B, D]`` on the model's device (differentiable)."""
        inputs = self.pixels(images)
        if self.family == "open_clip":
            return F.normalize(self.model.encode_image(inputs["pixel_values"]).float(), dim=-1)
        dtype = next(self.model.parameters()).dtype
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
        return F.normalize(_pooled(self.model.get_image_features(**inputs)).float(), dim=-1)

    def embed_text(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text embeddings ``[T, D]`` on the model's device."""
        if self.family == "open_clip":
            return F.normalize(self.model.encode_text(self.tokens(texts)["text"]).float(), dim=-1)
        return F.normalize(_pooled(self.model.get_text_features(**self.tokens(texts))).float(), dim=-1)

    _encode_image = embed_image

    def _encode_text(self, texts: list[str]) -> torch.Tensor:
        return self.embed_text(texts)

    # ----------------------------------------------------------------- zero-shot
    def logit_scale(self) -> torch.Tensor:
        return self.model.logit_scale.exp().float()

    def logit_bias(self) -> torch.Tensor | None:
        bias = getattr(self.model, "logit_bias", None)
        return None if bias is None else bias.float()

    def logits(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Image-text logits ``[B, T]`` of normalised embeddings: ``scale * cos`` (CLIP), ``+ bias`` (SigLIP)."""
        logits = self.logit_scale().to(image.device) * image @ text.to(image.device).T
        bias = self.logit_bias()
        return logits if bias is None else logits + bias.to(image.device)

    def zero_shot(self, prompts: Sequence[str]) -> ZeroShot:
        """A classifier over ``prompts`` (one per class): ``classifier(images) -> logits [B, len(prompts)]``."""
        return ZeroShot(self, prompts)


class ZeroShot:
    """Logits of images over fixed prompts; the prompts' embeddings are computed once per device."""

    def __init__(self, encoder: ImageTextEncoder, prompts: Sequence[str]) -> None:
        self.encoder, self.prompts = encoder, list(prompts)
        self._text: torch.Tensor | None = None

    def text(self) -> torch.Tensor:
        """The prompts' normalised embeddings ``[P, D]`` on the encoder's device."""
        if self._text is None or self._text.device != self.encoder.device:
            with torch.no_grad():
                self._text = self.encoder.embed_text(self.prompts)
        return self._text

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, P]`` (differentiable in the images)."""
        return self.encoder.logits(self.encoder.embed_image(images), self.text())

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The index of the best prompt per image ``[B]`` (on the CPU), in chunks of the encoder's batch size."""
        return torch.cat([self(chunk).argmax(-1).cpu() for chunk in images.split(self.encoder.batch_size)])
