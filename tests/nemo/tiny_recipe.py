"""Tiny local stand-ins for the real-model distillation recipe, built offline in seconds.

* an ImageNet-style folder ``<root>/<wnid>/<image>.png`` of generated images (distinct bytes per split);
* a random ``test_resnet`` timm ImageNet classifier (timm's 0.5 M-parameter test architecture with the
  1,000-class head) saved as a safetensors state dict, loaded like hub weights through
  ``TimmModel(weights_file=...)``;
* a random InstructPix2Pix pipeline saved with ``save_pretrained`` (loaded by ``DiffusionPipeline.from_pretrained``);
* a scripted OpenAI-compatible responder that answers each of the recipe's prompts in the JSON it asks for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import timm
import torch
from loopback_openai_server import Reply, completion
from PIL import Image
from safetensors.torch import save_file

from nemo_train.scoring.editing import tiny_random_instruct_pix2pix

#: goldfish, great white shark, tench: ImageNet-R classes (WordNet ids) of the tiny folders
WNIDS = ("n01443537", "n01484850", "n01440764")
TIMM_ARCH = "test_resnet.r160_in1k"

#: What the scripted teacher / judge answers (recognisable, so a test can tell who wrote a row).
HYPOTHESIS = "The painted rendering style hides the scales the classifier relies on."
INSTRUCTION = "Make the fish look like a photograph"
JUDGE_REASON = "scripted judge"


def write_image_folder(root: Path, per_class: int, seed: int, stem: str = "img", size: int = 40) -> Path:
    """``root/<wnid>/<stem><i>.png``: smooth random colour fields, different bytes for every ``seed``."""
    rng = np.random.default_rng(seed)
    for wnid in WNIDS:
        folder = root / wnid
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            coarse = rng.integers(0, 256, size=(5, 5, 3), dtype=np.uint8)
            image = Image.fromarray(coarse).resize((size, size), Image.BILINEAR)
            image.save(folder / f"{stem}{i}.png")
    return root


def save_tiny_timm(path: Path) -> Path:
    """Random weights of timm's ``test_resnet`` ImageNet classifier as a safetensors state dict."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = timm.create_model(TIMM_ARCH, pretrained=False)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def tiny_instruct_pix2pix():
    """The package's offline tiny InstructPix2Pix (seed 0, width 8)."""
    return tiny_random_instruct_pix2pix(seed=0, width=8)


def save_tiny_instruct_pix2pix(folder: Path) -> Path:
    """A random InstructPix2Pix pipeline saved as a diffusers folder (``model_index.json`` + components)."""
    with torch.random.fork_rng(devices=[]):
        tiny_instruct_pix2pix().save_pretrained(folder)
    return folder


def _text(request: dict) -> str:
    parts = []
    for message in request["body"]["messages"]:
        content = message["content"]
        if isinstance(content, str):
            parts.append(content)
        else:
            parts += [p.get("text", "") for p in content if p.get("type") == "text"]
    return "\n".join(parts)


def scripted_reply(request: dict) -> Reply:
    """The teacher's and the judges' answers: hypotheses, editing instructions, captions and grades."""
    text = _text(request)
    n = int(request["body"].get("n") or 1)
    if '"score"' in text:
        answer = json.dumps({"reasoning": JUDGE_REASON, "score": 1})
    elif '"solution"' in text:
        answer = json.dumps({"reasoning": "undo the rendering style", "solution": INSTRUCTION})
    elif "cause_of_error" in text:
        return completion(*[json.dumps({"cause_of_error": f"{HYPOTHESIS} ({i})"}) for i in range(n)])
    else:  # a reference caption
        answer = "A fish in front of a plain background."
    return completion(*[answer] * n)
