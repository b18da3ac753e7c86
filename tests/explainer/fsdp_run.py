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


def preset_config(*configs: Path) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The ``trainer.strategy`` (``class_path`` / ``init_args``), ``trainer.precision`` and model arguments that
    ``--config`` files give (later files win, as on the command line); nothing is built."""
    args = [item for config in configs for item in ("--config", str(config))]
    cli = _ParseOnly(args=[*args, "--trainer.logger=false"], run=False)
    return cli.config.trainer.strategy.as_dict(), cli.config.trainer.precision, cli.config.model.init_args.as_dict()


def build_strategy(config: dict[str, Any], base: type = FSDPStrategy) -> Any:
    """The strategy object of a ``class_path`` / ``init_args`` dict, instantiated as LightningCLI does."""
    parser = ArgumentParser()
    parser.add_subclass_arguments(base, "strategy")
    return parser.instantiate_classes(parser.parse_object({"strategy": config})).strategy


def preset(family: str) -> tuple[FSDPStrategy, FSDPPrecision, dict[str, Any]]:
    """The FSDP strategy, precision plugin and model arguments of ``<family preset> + fsdp_qlora.yaml``."""
    strategy, precision, init_args = preset_config(CONFIGS / PRESETS[family], STRATEGY)
    return build_strategy(strategy), FSDPPrecision(precision), init_args


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
