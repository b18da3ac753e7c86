"""Every explainer config parses; the tiny config fits through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nemo_train.lightning_cli import NemoLightningCLI

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "explainer"
PRESETS = sorted(CONFIGS.glob("*.yaml"))
STRATEGIES = sorted((CONFIGS / "strategies").glob("*.yaml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_preset_instantiates_without_loading_weights(path, preset_cli, explainer_cache):
    cli = preset_cli(f"explainer/{path.name}")
    from datamodules.explanations import ExplanationDataModule
    from nemo_train.explainer import ExplainerModule

    assert isinstance(cli.model, ExplainerModule) and cli.model.model is None  # built later, in configure_model
    if path.name.startswith("grpo"):  # errors to answer, not pairs to encode (tests/explainer/test_grpo.py)
        from datamodules.explanations.error_prompts import ErrorPromptsDataModule

        assert isinstance(cli.datamodule, ErrorPromptsDataModule)
        return
    assert isinstance(cli.datamodule, ExplanationDataModule)
    assert cli.model.hparams.model_name_or_path == cli.datamodule.hparams.model_name_or_path
    if "qlora" in path.name:  # competency-counterfactuals paper, App. C
        hp = cli.model.hparams
        assert (hp.lora_r, hp.lora_alpha, hp.lora_dropout, hp.lr, hp.load_in_4bit) == (16, 16, 0.0, 2e-4, True)
        assert (
            cli.datamodule.hparams.batch_size == 4
            and cli.trainer.accumulate_grad_batches == 4
            and cli.trainer.max_epochs == 10
        )


class _ParseOnly(NemoLightningCLI):
    """Parses and validates a config (class paths, argument names and types) without building anything."""

    def instantiate_classes(self) -> None:
        pass


@pytest.mark.parametrize("path", STRATEGIES, ids=lambda p: p.name)
def test_strategy_snippets_combine_with_a_preset(path, tmp_path):
    cli = _ParseOnly(
        args=["--config", str(CONFIGS / "qwen2_5_vl_7b_qlora.yaml"), "--config", str(path), "--trainer.logger=false"],
        run=False,
    )
    strategy = cli.config.trainer.strategy
    expected = {"ddp.yaml": "DDPStrategy", "fsdp_qlora.yaml": "FSDPStrategy"}
    assert strategy.class_path.endswith(expected.get(path.name, "DeepSpeedStrategy"))
    if "deepspeed" in path.name:
        assert strategy.init_args.stage == int(path.stem[-1]) and strategy.init_args.exclude_frozen_parameters
    if "fsdp" in path.name:  # QLoRA under FSDP: storage dtype = compute dtype, set in the model's quantization config
        from nemo_train.explainer import ExplainerModule

        config = ExplainerModule(**dict(cli.config.model.init_args)).quantization_config()
        assert config.bnb_4bit_quant_storage == config.bnb_4bit_compute_dtype == torch.bfloat16
        assert cli.config.trainer.precision == "bf16-true"
        assert strategy.init_args.auto_wrap_policy.class_path.endswith("NoSplitModulesPolicy")


def test_tiny_config_fits_through_the_cli(six_cause_pairs, tmp_path, explainer_cache, monkeypatch):
    from nemo_train.cli import run_lightning_cli

    monkeypatch.chdir(tmp_path)  # the config writes under checkpoints/explainer_tiny/

    run_lightning_cli(
        [
            "fit",
            "--config",
            str(CONFIGS / "tiny.yaml"),
            "--trainer.accelerator=cpu",
            "--trainer.logger=false",
            "--trainer.max_epochs=1",
            "--trainer.check_val_every_n_epoch=1",
            "--trainer.enable_progress_bar=false",
            f"--data.init_args.train_jsonl={six_cause_pairs['train']}",
            f"--data.init_args.val_jsonl={six_cause_pairs['val']}",
        ]
    )
    run = tmp_path / "checkpoints" / "explainer_tiny"
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "checkpoints" / "best.ckpt").is_file()
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    # best.ckpt monitors val/explanation_acc, so the accuracy callback ran and logged it
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
