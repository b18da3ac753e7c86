"""Zero-shot targets: a CLIP / SigLIP model as a classifier of a benchmark's classes, one prompt per class.

A :class:`ZeroShotTarget` also supports *prompt intervention*: the prompt of one class is replaced by a
counterfactual prompt and ``P(y)`` is read off the new softmax. :func:`tiny_random_clip` builds a small random
CLIP offline (tests, the tiny editors' tokenizer).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from nemo_train.errors import UserInputError
from nemo_train.models.clip import CLIP_MEAN, CLIP_STD
from nemo_train.models.image_text import ImageTextEncoder, PixelPreprocess
from nemo_train.models.targets import Target, tokens_to_map


class ZeroShotTarget(Target):
    """CLIP, SigLIP or SigLIP 2 zero-shot classifier: one prompt per class, over an
    :class:`~nemo_train.models.image_text.ImageTextEncoder`.

    ``P(.|x)`` is the softmax over the encoder's image-text logits (``logit_scale * cos``, plus SigLIP's bias,
    which cancels in the softmax). :meth:`proba_with_prompts` evaluates the same image with other class
    prompts, which is how a counterfactual *prompt* intervention is scored.

    Args:
        model: a hub id / local folder (loaded by :meth:`ImageTextEncoder.from_pretrained`), an
            :class:`ImageTextEncoder`, or a transformers ``CLIPModel`` / ``SiglipModel`` module built in code.
        class_names: benchmark classes; ``template`` is filled with each (``"a photo of a {}"``).
        tokenizer: the module's tokenizer (only when ``model`` is a module).
        class_prompts: one prompt per class instead of the template (e.g. written like a CLIP's training
            captions, ``"the digit three"``).
        image_size: the input side (default: the processor's, or the module's vision config).
        mean, std: pixel normalisation of a module (a loaded model uses its processor's).
    """

    def __init__(
        self,
        model: nn.Module | str,
        class_names: Sequence[str],
        tokenizer=None,
        template: str = "a photo of a {}",
        image_size: int | None = None,
        class_prompts: Sequence[str] | None = None,
        mean: Sequence[float] = CLIP_MEAN,
        std: Sequence[float] = CLIP_STD,
    ) -> None:
        super().__init__()
        if "{}" not in template:
            raise UserInputError(f"prompt template {template!r} must contain '{{}}' where the class name goes")
        if isinstance(model, str):
            self.encoder = ImageTextEncoder.from_pretrained(model, image_size=image_size)
        elif isinstance(model, ImageTextEncoder):
            self.encoder = model
        else:
            if tokenizer is None:
                raise UserInputError("ZeroShotTarget needs a tokenizer when the model is passed as a module")
            size = image_size or model.config.vision_config.image_size
            self.encoder = ImageTextEncoder(model, tokenizer, PixelPreprocess(size, mean, std, resample="bicubic"))
        self.template = template
        self.class_names = list(class_names)
        if class_prompts is not None and len(class_prompts) != len(self.class_names):
            raise UserInputError(f"{len(class_prompts)} class prompts for {len(self.class_names)} classes")
        self.class_prompts = None if class_prompts is None else list(class_prompts)
        self.classifier = self.encoder.zero_shot(self.prompts)

    @property
    def model(self) -> nn.Module:
        return self.encoder.model

    @property
    def tokenizer(self):
        return self.encoder.tokenizer

    @property
    def is_siglip(self) -> bool:
        return self.encoder.is_siglip

    @property
    def image_size(self) -> int | None:
        size = self.encoder.pixels.size
        return None if size is None else size[0]

    @property
    def mean(self) -> torch.Tensor:
        return self.encoder.pixels.mean

    @property
    def std(self) -> torch.Tensor:
        return self.encoder.pixels.std

    @property
    def prompts(self) -> list[str]:
        """The original prompt ``s_o`` of each class."""
        return self.class_prompts or [self.template.format(name) for name in self.class_names]

    def prompt_for(self, class_index: int) -> str:
        return self.prompts[class_index]

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text embeddings ``[T, D]``."""
        return self.encoder.embed_text(texts)

    @torch.no_grad()
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings ``[B, D]``."""
        return self.encoder.embed_image(images)

    def class_text(self) -> torch.Tensor:
        return self.classifier.text()

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(images)

    def gradcam_layer(self) -> nn.Module:
        """Grad-CAM layer: the first norm of the vision tower's last layer."""
        return self.model.vision_model.encoder.layers[-1].layer_norm1

    def gradcam_reshape(self):
        if self.encoder.family == "siglip2":  # a padded patch sequence on the last batch's grid
            return _grid_to_map(self.encoder.pixels)
        return tokens_to_map(0 if self.is_siglip else 1)

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.encode_image(images)

    @torch.no_grad()
    def proba_with_prompts(self, images: torch.Tensor, class_index: int, prompts: Sequence[str]) -> torch.Tensor:
        """``P(class_index | x)`` ``[B, P]`` when that class's prompt is replaced by each of ``prompts``."""
        image = self.encode_image(images)  # [B, D]
        base = self.encoder.logits(image, self.class_text())  # [B, K]
        new = self.encoder.logits(image, self.encode_text(prompts))  # [B, P]
        out = []
        for p in range(new.shape[1]):
            logits = base.clone()
            logits[:, class_index] = new[:, p]
            out.append(logits.softmax(-1)[:, class_index])
        return torch.stack(out, -1)


def _grid_to_map(pixels: PixelPreprocess):
    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        rows, cols = pixels.last_grid
        tokens = tokens[:, : rows * cols]
        return tokens.reshape(tokens.shape[0], rows, cols, tokens.shape[2]).permute(0, 3, 1, 2)

    return reshape


def tiny_random_clip(class_names: Sequence[str], seed: int = 0, image_size: int = 32) -> ZeroShotTarget:
    """A randomly initialised two-layer CLIP with a character-level tokenizer, built offline.

    Its similarities carry no meaning: it exercises the zero-shot / ErrorRetrieval code paths in tests
    and on machines without hub access. Use a real hub id (``openai/clip-vit-base-patch32``) for results.
    """
    chars = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    bos, eos = len(vocab), len(vocab) + 1
    vocab.update({"<|startoftext|>": bos, "<|endoftext|>": eos})
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "vocab.json").write_text(json.dumps(vocab))
        (Path(folder) / "merges.txt").write_text("#version: 0.2\n")
        tokenizer = CLIPTokenizer(str(Path(folder) / "vocab.json"), str(Path(folder) / "merges.txt"))
    torch.manual_seed(seed)
    layers = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(vocab),
            max_position_embeddings=128,
            bos_token_id=bos,
            eos_token_id=eos,
            pad_token_id=eos,
            **layers,
        ),
        vision_config=dict(image_size=image_size, patch_size=8, **layers),
        projection_dim=16,
    )
    return ZeroShotTarget(CLIPModel(config), class_names, tokenizer=tokenizer, image_size=image_size)
