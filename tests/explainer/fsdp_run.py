"""Torch FSDP on CPU (gloo) set up as Lightning's ``FSDPStrategy`` does it, from a shipped strategy preset.

Lightning refuses FSDP without a GPU, so the strategy object is built from the preset (its wrap policy,
activation-checkpointing policy, sharding strategy) and its setup is repeated here: the module is built
under the precision plugin's init context, converted (``bf16-true``), wrapped in
``FullyShardedDataParallel`` with the plugin's mixed precision, then checkpointed by Lightning's own
``_setup_activation_checkpointing``. The only difference is ``device_id=cpu``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from jsonargparse import ArgumentParser
from lightning.fabric.strategies.fsdp import _setup_activation_checkpointing
from lightning.pytorch.plugins.precision import FSDPPrecision
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel

from datamodules.explanations import to_pil
from datamodules.explanations.encoding import ConversationEncoder, collate_encoded
from nemo_train.explainer import ExplainerModule
from nemo_train.lightning_cli import NemoLightningCLI
from nemo_train.models.vlm import load_processor

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "explainer"
PRESETS = {
    "qwen2_5_vl": "qwen2_5_vl_7b_qlora.yaml",
    "qwen3_vl": "qwen3_vl_8b_qlora.yaml",
    "mllama": "llama3_2_11b_vision_qlora.yaml",
}
STRATEGY = CONFIGS / "strategies" / "fsdp_qlora.yaml"


class _ParseOnly(NemoLightningCLI):
    def instantiate_classes(self) -> None:
        pass


def preset(family: str) -> tuple[FSDPStrategy, FSDPPrecision, dict[str, Any]]:
    """The FSDP strategy, precision plugin and model arguments of ``<family preset> + fsdp_qlora.yaml``."""
    cli = _ParseOnly(
        args=["--config", str(CONFIGS / PRESETS[family]), "--config", str(STRATEGY), "--trainer.logger=false"],
        run=False,
    )
    parser = ArgumentParser()
    parser.add_subclass_arguments(FSDPStrategy, "strategy")
    parsed = parser.parse_object({"strategy": cli.config.trainer.strategy.as_dict()})
    strategy = parser.instantiate_classes(parsed).strategy
    return strategy, FSDPPrecision(cli.config.trainer.precision), cli.config.model.init_args.as_dict()


def sharded_module(family: str, model_path: Path, **overrides: Any) -> tuple[ExplainerModule, Any, FSDPPrecision]:
    """The preset's explainer on ``model_path``, wrapped as Lightning wraps it; returns (module, trainer stand-in,
    precision plugin). The stand-in carries the strategy with ``strategy.model`` set, all that the explainer's
    sharding helpers read of a trainer. A process group must be initialised."""
    strategy, plugin, init_args = preset(family)
    module = ExplainerModule(**{**init_args, "model_name_or_path": str(model_path), **overrides})
    with plugin.tensor_init_context():
        module.configure_model()
    module = plugin.convert_module(module)
    wrapped = FullyShardedDataParallel(
        module,
        cpu_offload=strategy.cpu_offload,
        mixed_precision=plugin.mixed_precision_config,
        sharding_strategy=strategy.sharding_strategy,
        device_id=torch.device("cpu"),  # Lightning passes the GPU index here
        **strategy.kwargs,
    )
    _setup_activation_checkpointing(wrapped, strategy._activation_checkpointing_kwargs)
    strategy.model = wrapped
    return module, SimpleNamespace(strategy=strategy), plugin


def padded_batch(model_path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """Two encoded conversations of different lengths (so the shorter one is padded), with labels."""
    processor = load_processor(str(model_path))
    encoder = ConversationEncoder(processor, max_length=512)
    generator = torch.Generator().manual_seed(seed)
    samples = [
        encoder.encode(to_pil(torch.rand(3, 28, 28, generator=generator)), "Why?", answer)
        for answer in ("The image is covered in random noise.", "It is too dark.")
    ]
    return collate_encoded(samples, processor.tokenizer.pad_token_id)
