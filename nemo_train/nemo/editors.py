"""Instruction-following image editors from diffusers, for counterfactual image intervention.

:class:`DiffusersEditor` loads any diffusers editing pipeline by hub id or local folder —
``black-forest-labs/FLUX.1-Kontext-dev`` (``FluxKontextPipeline``), ``Qwen/Qwen-Image-Edit``
(``QwenImageEditPipeline``), ``timbrooks/instruct-pix2pix`` (``StableDiffusionInstructPix2PixPipeline``) —
through ``DiffusionPipeline.from_pretrained`` (the folder's ``model_index.json`` names the class), or takes
a ready pipeline object. All ``M`` instructions of one image run as one batched call, each with its own
seeded generator (``seed + i``), so edits are reproducible and independent of batch composition.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from nemo_train.backends.messages import to_pil
from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample

#: Per-pipeline defaults of the published editors (steps, guidance); overridable.
PIPELINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "FluxKontextPipeline": {"num_inference_steps": 28, "guidance_scale": 2.5},
    "QwenImageEditPipeline": {"num_inference_steps": 50, "true_cfg_scale": 4.0},
    "StableDiffusionInstructPix2PixPipeline": {
        "num_inference_steps": 20,
        "guidance_scale": 7.5,
        "image_guidance_scale": 1.5,
    },
}


class DiffusersEditor:
    """Edit one image with several instructions in a batch.

    Args:
        pipeline: a hub id / local path, or a loaded diffusers pipeline.
        seed: base seed; instruction ``i`` uses ``seed + i``.
        batch_size: instructions per pipeline call.
        device, dtype: where and how to load (``bfloat16`` on GPU, ``float32`` on CPU by default).
        size: edit resolution (the image is resized to it and the result back to the input size).
        call_kwargs: extra pipeline arguments (``num_inference_steps``, ``guidance_scale`` ...).
    """

    def __init__(
        self,
        pipeline: str | Any,
        seed: int = 0,
        batch_size: int = 4,
        device: str | None = None,
        dtype: str | None = None,
        size: int = 512,
        call_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if isinstance(pipeline, str):
            # diffusers is heavy and only needed for image-folder benchmarks: imported on first use
            from diffusers import DiffusionPipeline

            torch_dtype = (
                getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
            )
            try:
                pipeline = DiffusionPipeline.from_pretrained(pipeline, torch_dtype=torch_dtype)
            except (OSError, ValueError) as err:
                raise UserInputError(
                    f"cannot load diffusers pipeline {pipeline!r}: {str(err).splitlines()[0]}"
                ) from None
            pipeline = pipeline.to(self.device)
        pipeline.set_progress_bar_config(disable=True)
        self.pipeline = pipeline
        self.seed, self.batch_size, self.size = seed, batch_size, size
        self.call_kwargs = {**PIPELINE_DEFAULTS.get(type(pipeline).__name__, {}), **(call_kwargs or {})}
        accepted = inspect.signature(type(pipeline).__call__).parameters
        if (
            "height" in accepted and "width" in accepted
        ):  # Kontext / Qwen take the output size; pix2pix follows the input
            self.call_kwargs = {"height": size, "width": size, **self.call_kwargs}
        if "max_area" in accepted and "_auto_resize" in accepted:
            # FLUX.1 Kontext rescales height/width to max_area (1024^2) and snaps the input to its preferred
            # resolutions unless told otherwise: keep the configured edit size
            self.call_kwargs = {"max_area": size * size, "_auto_resize": False, **self.call_kwargs}
        if (
            self.call_kwargs.get("true_cfg_scale", 1.0) > 1.0
            and "negative_prompt" in accepted
            and "negative_prompt" not in self.call_kwargs
        ):  # Qwen-Image-Edit applies true CFG only with a negative prompt; " " is its published default
            self.call_kwargs["negative_prompt"] = " "

    def edit(self, sample: ErrorSample, instructions: Sequence[str | None]) -> torch.Tensor:
        """``[M, 3, H, W]`` edits of ``sample.image``; a ``None`` instruction returns the image unchanged."""
        image = sample.image
        height, width = image.shape[-2:]
        source = to_pil(F.interpolate(image[None], size=(self.size, self.size), mode="bilinear", antialias=True)[0])
        out = image[None].repeat(len(instructions), 1, 1, 1)
        todo = [i for i, text in enumerate(instructions) if text]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            generators = [torch.Generator(device="cpu").manual_seed(self.seed + i) for i in chunk]
            kwargs = dict(self.call_kwargs)
            if isinstance(kwargs.get("negative_prompt"), str):  # one negative prompt per instruction
                kwargs["negative_prompt"] = [kwargs["negative_prompt"]] * len(chunk)
            result = self.pipeline(
                prompt=[instructions[i] for i in chunk],
                image=[source] * len(chunk),
                generator=generators,
                output_type="pt",
                **kwargs,
            )
            edited = result.images.float().cpu()
            if edited.shape[-1] == 3:  # some pipelines return channels last
                edited = edited.permute(0, 3, 1, 2)
            out[chunk] = F.interpolate(edited, size=(height, width), mode="bilinear", antialias=True).clamp(0, 1)
        return out
