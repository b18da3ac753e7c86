"""Instruction-following image editors from diffusers, for counterfactual image intervention.

:class:`DiffusersEditor` loads any diffusers editing pipeline by hub id or local folder —
``black-forest-labs/FLUX.1-Kontext-dev`` (``FluxKontextPipeline``), ``Qwen/Qwen-Image-Edit``
(``QwenImageEditPipeline``), ``timbrooks/instruct-pix2pix`` (``StableDiffusionInstructPix2PixPipeline``) —
through ``DiffusionPipeline.from_pretrained`` (the folder's ``model_index.json`` names the class), or takes
a ready pipeline object. The instructions of one error, or of every error of a chunk
(:meth:`DiffusersEditor.edit_many`), go to the pipeline ``batch_size`` at a time as lists of prompts and
images, each edit with its own generator seeded from its place in its error's list (``seed + i``), so edits
are reproducible and do not depend on what else shares their call.

:func:`tiny_random_instruct_pix2pix` builds a randomly initialised InstructPix2Pix pipeline offline (tests,
``scripts/bench_edits.py``); its edits carry no meaning.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from nemo_train.backends.messages import to_pil
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample

#: How images are resized to the edit size and back.
RESIZE: dict[str, Any] = {"mode": "bilinear", "antialias": True}

#: Per-pipeline defaults of the published editors (steps, guidance); overridable.
PIPELINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "FluxKontextPipeline": {"num_inference_steps": 28, "guidance_scale": 2.5},
    "QwenImageEditPipeline": {"num_inference_steps": 50, "true_cfg_scale": 4.0},
    "QwenImageEditPlusPipeline": {"num_inference_steps": 40, "true_cfg_scale": 4.0, "guidance_scale": 1.0},
    "StableDiffusionInstructPix2PixPipeline": {
        "num_inference_steps": 20,
        "guidance_scale": 7.5,
        "image_guidance_scale": 1.5,
    },
}

#: Pipelines that read a list of images as several inputs of ONE edit (Qwen-Image-Edit-2509 composes them), so
#: their edits cannot share a call: one edit per call whatever ``batch_size`` says.
ONE_EDIT_PER_CALL = frozenset({"QwenImageEditPlusPipeline"})


class DiffusersEditor:
    """Edit images with instructions, many edits per pipeline call.

    Args:
        pipeline: a hub id / local path, or a loaded diffusers pipeline.
        seed: base seed; instruction ``i`` of an error uses ``seed + i``.
        batch_size: edits per pipeline call (they may belong to several errors); it bounds memory and does
            not change the edits.
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
        if type(pipeline).__name__ in ONE_EDIT_PER_CALL:
            self.batch_size = 1
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
        return self.edit_many([sample], [instructions])[0]

    def edit_many(
        self, samples: Sequence[ErrorSample], instructions: Sequence[Sequence[str | None]]
    ) -> list[torch.Tensor]:
        """The edits of several errors, one ``[M_j, 3, H_j, W_j]`` tensor per error.

        The non-empty instructions of all errors form one queue that goes to the pipeline ``batch_size``
        at a time: each call gets a list of prompts, the matching list of source images and one generator
        per edit. Edit ``i`` of an error is seeded with ``seed + i`` whatever else shares its call, so an
        error's edits are those :meth:`edit` gives it alone (up to float rounding: batched kernels may sum
        in another order).
        """
        if len(samples) != len(instructions):
            raise UserInputError(f"{len(samples)} samples but {len(instructions)} instruction lists")
        out = [s.image[None].repeat(len(found), 1, 1, 1) for s, found in zip(samples, instructions)]
        queue = [(j, i) for j, found in enumerate(instructions) for i, text in enumerate(found) if text]
        sources: dict[int, Any] = {}
        for start in range(0, len(queue), self.batch_size):
            chunk = queue[start : start + self.batch_size]
            for j, _ in chunk:
                if j not in sources:  # each error's image is resized to the edit size once
                    image = samples[j].image[None].float()
                    sources[j] = to_pil(F.interpolate(image, size=(self.size, self.size), **RESIZE)[0])
            edited = self.run_pipeline(
                [instructions[j][i] for j, i in chunk],
                [sources[j] for j, _ in chunk],
                [self.seed + i for _, i in chunk],
            )
            for (j, i), image in zip(chunk, edited):
                size = tuple(samples[j].image.shape[-2:])
                out[j][i] = F.interpolate(image[None], size=size, **RESIZE)[0].clamp(0, 1)
        return out

    def run_pipeline(self, prompts: list[str], images: list, seeds: list[int]) -> torch.Tensor:
        """One pipeline call: ``prompts[k]`` applied to ``images[k]`` with a generator seeded ``seeds[k]``;
        ``[len(prompts), 3, size, size]`` float images in ``[0, 1]`` on the CPU."""
        kwargs = dict(self.call_kwargs)
        if isinstance(kwargs.get("negative_prompt"), str):  # one negative prompt per instruction
            kwargs["negative_prompt"] = [kwargs["negative_prompt"]] * len(prompts)
        result = self.pipeline(
            prompt=list(prompts),
            image=list(images),
            generator=[torch.Generator(device="cpu").manual_seed(seed) for seed in seeds],
            output_type="pt",
            **kwargs,
        )
        edited = result.images.float().cpu()
        return edited.permute(0, 3, 1, 2) if edited.shape[-1] == 3 else edited  # some pipelines return channels last


def tiny_random_instruct_pix2pix(seed: int = 0, width: int = 8):
    """A randomly initialised InstructPix2Pix pipeline (tens of thousands of parameters), built offline.

    ``width`` is the UNet's first block's channels (the second has twice as many). It runs the real
    pipeline code (text encoder, VAE, UNet, Euler ancestral scheduler) at toy size, for tests and
    ``scripts/bench_edits.py``; use a real folder or hub id for results.
    """
    # diffusers is needed only for image-folder editors: imported on first use
    from diffusers import (
        AutoencoderKL,
        EulerAncestralDiscreteScheduler,
        StableDiffusionInstructPix2PixPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    from nemo_train.models.zero_shot import tiny_random_clip

    tokenizer = tiny_random_clip(["x"]).tokenizer  # offline character-level tokenizer
    tokenizer.model_max_length = 77
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(
            block_out_channels=(width, 2 * width),
            layers_per_block=1,
            sample_size=8,
            in_channels=8,  # noisy latents + image latents
            out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32,
            norm_num_groups=4,
            attention_head_dim=4,
        )
        vae = AutoencoderKL(
            block_out_channels=[8, 16],
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
            latent_channels=4,
            norm_num_groups=4,
            sample_size=32,
        )
        text_encoder = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=len(tokenizer),
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=77,
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.eos_token_id,
            )
        )
    return StableDiffusionInstructPix2PixPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=EulerAncestralDiscreteScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
