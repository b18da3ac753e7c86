"""The open-set path: a diffusers text-to-image generator.

:class:`DiffusersTextToImage` draws ``n`` images per caption (Stable Diffusion 3.5 by hub id, or any
diffusers text-to-image pipeline folder). The gender experiment of "Towards automatic discovery and explanation
of differences between vision models" (Sec. 5.3) compares two SigLIP zero-shot classifiers that differ in their
prompts: :class:`~nemo_train.models.specs.ZeroShotModel` with ``prompts``, as ``--targets``.
The diffusers pipeline is a heavy optional dependency, imported when built.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nemo_train.differences.conditions import TextSpace
from nemo_train.differences.generators import ConditionalGenerator, condition_rng

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _device(name: str) -> torch.device:
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else "cpu" if name == "auto" else name)


class DiffusersTextToImage(ConditionalGenerator):
    """Text-to-image generator over open-set caption conditions.

    Args:
        model_id: hub id or local folder of a diffusers pipeline.
        class_names: class of each label (``["man", "woman"]``).
        class_terms: words a caption of each class must contain (and no other class's).
        task_description: the models' task, for prompts.
        steps, guidance_scale, image_size: sampling settings.
        dtype: weights' dtype on the accelerator (``float32`` on CPU).
        device: ``auto``, ``cpu`` or ``cuda``.
        images_per_call: images per pipeline call.
        drop_components: pipeline parts loaded as ``None`` (e.g. ``[text_encoder_3, tokenizer_3]`` runs
            Stable Diffusion 3 without its large T5 encoder).
    """

    def __init__(
        self,
        model_id: str = "stabilityai/stable-diffusion-3.5-medium",
        class_names: Sequence[str] = ("man", "woman"),
        class_terms: Sequence[Sequence[str]] = (
            ("man", "boy", "male", "gentleman"),
            ("woman", "girl", "female", "lady"),
        ),
        task_description: str = "binary classifiers of gender (man or woman) from images",
        steps: int = 28,
        guidance_scale: float = 3.5,
        image_size: int = 512,
        dtype: str = "bfloat16",
        device: str = "auto",
        images_per_call: int = 8,
        drop_components: Sequence[str] = (),
    ) -> None:
        self.model_id, self.steps, self.guidance_scale, self.image_size = model_id, steps, guidance_scale, image_size
        self.space = TextSpace(class_names, class_terms)
        self.task_description = task_description
        self.device = _device(device)
        self.dtype = DTYPES[dtype] if self.device.type == "cuda" else torch.float32
        self.images_per_call = images_per_call
        self.drop_components = list(drop_components)
        self.pipe = None

    @property
    def identity(self) -> str:
        return (
            f"DiffusersTextToImage({self.model_id}, steps={self.steps}, cfg={self.guidance_scale}, {self.image_size}px)"
        )

    def _pipeline(self):
        if self.pipe is None:
            from diffusers import DiffusionPipeline  # heavy optional dependency
            from diffusers.utils import logging as diffusers_logging

            diffusers_logging.disable_progress_bar()
            dropped = {name: None for name in self.drop_components}
            pipe = DiffusionPipeline.from_pretrained(self.model_id, dtype=self.dtype, **dropped)
            self.pipe = pipe.to(self.device)
            self.pipe.set_progress_bar_config(disable=True)
        return self.pipe

    @torch.no_grad()
    def generate(self, conditions, n, seed):
        pipe = self._pipeline()
        images, labels = [], []
        for condition in conditions:
            seeds = condition_rng(condition, seed).integers(0, 2**31 - 1, n).tolist()
            for start in range(0, n, self.images_per_call):
                chunk = seeds[start : start + self.images_per_call]
                out = pipe(
                    prompt=[condition.text] * len(chunk),
                    num_inference_steps=self.steps,
                    guidance_scale=self.guidance_scale,
                    height=self.image_size,
                    width=self.image_size,
                    generator=[torch.Generator(self.device).manual_seed(s) for s in chunk],
                    output_type="pt",
                )
                images.append(out.images.float().cpu().clamp(0, 1))
            labels += [condition.label] * n
        return torch.cat(images), torch.tensor(labels, dtype=torch.long)
