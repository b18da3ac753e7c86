"""4-bit (bitsandbytes) details of QLoRA fine-tuning that the libraries leave to the caller.

* bitsandbytes' CPU kernels (on CPUs with AVX512-BF16) repack a ``Linear4bit`` weight into an inference
  layout on the first eval-mode, no-grad forward: a later training forward then fails with "a view of a
  leaf Variable that requires grad is being used in an in-place operation", and layers narrower than the
  packing block fail at once. :func:`keep_training_layout` turns that repacking off, so validation,
  generation and training use one layout.
* Modules trained in full (peft ``modules_to_save``) cannot be quantized: :func:`skip_patterns` keeps them
  in full precision, and :func:`check_modules_to_save` names any that still hold 4-bit weights.
"""

from __future__ import annotations

import re

import torch
from bitsandbytes.nn import Linear4bit, Params4bit

from nemo_train.errors import UserInputError


def keep_training_layout(model: torch.nn.Module) -> int:
    """Turn off bitsandbytes' CPU inference repacking in every ``Linear4bit`` of ``model``; returns how many."""
    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def skip_patterns(modules_to_save: list[str] | None) -> list[str]:
    """``llm_int8_skip_modules`` patterns that keep each ``modules_to_save`` entry unquantized."""
    return [rf"(.*\.)?{re.escape(name)}" for name in modules_to_save or []]


def check_modules_to_save(model: torch.nn.Module, modules_to_save: list[str] | None) -> None:
    """One-line error when a module to train in full holds 4-bit weights (peft cannot train them)."""
    for target in modules_to_save or []:
        for name, module in model.named_modules():
            if name != target and not name.endswith("." + target):
                continue
            quantized = [n for n, p in module.named_parameters() if isinstance(p, Params4bit)]
            if quantized:
                raise UserInputError(
                    f"modules_to_save entry {target!r} holds {len(quantized)} 4-bit weight(s) (e.g. {name}.{quantized[0]}); "
                    "a quantized module cannot be trained in full: add it to quant_skip_modules or remove it from modules_to_save"
                )
