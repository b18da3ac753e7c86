"""ExplainerModule: LoRA-only updates, 4-bit QLoRA on CPU, adapter / checkpoint round trips, bad input."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from datamodules.explanations import ExplanationDataModule
from nemo_train.callbacks.adapter_checkpoint import AdapterCheckpoint
from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule
from nemo_train.explainer.generation import generate_explanations
from nemo_train.explainer.module import warmup_then_linear_decay
from nemo_train.models.vlm import TINY_MODEL, load_processor


def _fit(module, pairs, steps, root, ckpt_path=None, **trainer_kwargs):
    dm = ExplanationDataModule(
        TINY_MODEL, load_processor, train_jsonl=str(pairs["train"]), val_jsonl=str(pairs["val"]), batch_size=4
    )
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        default_root_dir=str(root),
        **trainer_kwargs,
    )
    trainer.fit(module, dm, ckpt_path=ckpt_path)
    return trainer, dm


def test_lora_step_changes_every_lora_weight_and_nothing_else(six_cause_pairs, tmp_path):
    module = ExplainerModule(lr=1e-2)
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.model.named_parameters()}
    lora = {n for n in before if ".lora_A." in n or ".lora_B." in n}
    assert lora and {n for n, p in module.model.named_parameters() if p.requires_grad} == lora
    assert all("language_model" in n for n in lora)  # language-only by default
    _fit(module, six_cause_pairs, steps=2, root=tmp_path, enable_checkpointing=False)  # B moves at step 1, A at step 2
    after = dict(module.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert changed == lora


def test_vision_language_targets_skip_the_patch_embedding():
    from nemo_train.explainer import VISION_LANGUAGE_TARGETS

    module = ExplainerModule(lora_targets=VISION_LANGUAGE_TARGETS)
    module.configure_model()
    lora = [n for n, _ in module.model.named_parameters() if ".lora_A." in n]
    assert any("visual.blocks.0.attn.qkv" in n for n in lora) and any("visual.blocks.1.mlp.fc2" in n for n in lora)
    assert not any("patch_embed" in n or "merger" in n for n in lora)


def _bnb_4bit_works_on_cpu() -> str | None:
    try:
        import bitsandbytes as bnb

        layer = bnb.nn.Linear4bit(8, 8, quant_type="nf4", compute_dtype=torch.float32)
        layer.weight = bnb.nn.Params4bit(layer.weight.data, requires_grad=False, quant_type="nf4")
        layer = layer.to("cpu")
        layer(torch.randn(2, 8))
        return None
    except Exception as err:  # the skip reason names the exact failure
        return f"bitsandbytes 4-bit does not run on this CPU: {type(err).__name__}: {err}"


@pytest.mark.skipif(_bnb_4bit_works_on_cpu() is not None, reason=str(_bnb_4bit_works_on_cpu()))
def test_4bit_quantizes_linear_layers_and_trains_on_cpu(six_cause_pairs, tmp_path):
    import bitsandbytes as bnb

    module = ExplainerModule(load_in_4bit=True, lr=1e-2, gradient_checkpointing=True)
    module.configure_model()
    quantized = {n for n, m in module.model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    assert any("language_model.layers.0.self_attn.q_proj" in n for n in quantized)
    assert any("language_model.layers.1.mlp.down_proj" in n for n in quantized)
    assert not any("lm_head" in n or "merger" in n for n in quantized)  # head and projector stay full precision
    weight = module.model.base_model.model.model.language_model.layers[0].mlp.up_proj.base_layer.weight
    assert weight.dtype == torch.uint8 and weight.quant_state.quant_type == "nf4"
    before = {n: p.detach().clone() for n, p in module.model.named_parameters() if p.requires_grad}
    _fit(module, six_cause_pairs, steps=2, root=tmp_path, enable_checkpointing=False)
    after = dict(module.model.named_parameters())
    assert all(not torch.equal(before[n], after[n].detach()) for n in before)


@pytest.fixture(scope="module")
def trained(six_cause_pairs, tmp_path_factory):
    """A tiny explainer trained a few steps with a checkpoint and an adapter on disk."""
    root = tmp_path_factory.mktemp("run")
    module = ExplainerModule(lr=5e-3, modules_to_save=["lm_head"])
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, filename="last", enable_version_counter=False)
    trainer, dm = _fit(module, six_cause_pairs, steps=6, root=root, callbacks=[checkpoint, AdapterCheckpoint()])
    return module, dm, root


def _greedy(module, dm):
    records = dm.val_records[:6]
    return generate_explanations(module, [r.image for r in records], max_new_tokens=12, batch_size=4)


def test_adapter_round_trip_gives_the_same_greedy_generations(trained):
    module, dm, root = trained
    adapter = root / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file() and (adapter / "adapter_config.json").is_file()
    expected = _greedy(module, dm)
    assert any(e[0] for e in expected)
    reloaded = ExplainerModule.from_adapter(adapter)
    assert _greedy(reloaded, dm) == expected
    merged = ExplainerModule.from_adapter(adapter, merge=True)
    assert type(merged.model).__name__ == "Qwen2VLForConditionalGeneration"
    assert _greedy(merged, dm) == expected


def test_checkpoint_holds_only_trainable_weights_and_reloads(trained):
    module, dm, root = trained
    checkpoint = torch.load(root / "last.ckpt", map_location="cpu", weights_only=True)
    assert set(checkpoint["state_dict"]) == set(module.trainable_parameter_names())
    assert any("lora_B" in k for k in checkpoint["state_dict"]) and any(
        "lm_head" in k for k in checkpoint["state_dict"]
    )
    reloaded = ExplainerModule.load_from_checkpoint(root / "last.ckpt", map_location="cpu", weights_only=True)
    assert _greedy(reloaded.eval(), dm) == _greedy(module, dm)


def test_sampling_returns_m_samples_and_is_seeded(trained):
    module, dm, _ = trained
    images = [r.image for r in dm.val_records[:2]]
    a = generate_explanations(module, images, num_samples=3, temperature=1.5, max_new_tokens=8, seed=1)
    b = generate_explanations(module, images, num_samples=3, temperature=1.5, max_new_tokens=8, seed=1)
    assert a == b and [len(s) for s in a] == [3, 3]
    with pytest.raises(UserInputError, match="num_samples=0"):
        generate_explanations(module, images, num_samples=0)
    with pytest.raises(UserInputError, match="2 prompts for 1 images"):
        generate_explanations(module, images[:1], prompts=["a", "b"])


def test_bad_configuration_is_reported(tmp_path):
    with pytest.raises(UserInputError, match="lora_r=0"):
        ExplainerModule(lora_r=0)
    with pytest.raises(UserInputError, match="matches no module"):
        ExplainerModule(lora_targets=r".*no_such_layer").configure_model()
    with pytest.raises(UserInputError, match="not a saved explainer adapter"):
        ExplainerModule.from_adapter(tmp_path)
    with pytest.raises(UserInputError, match="cannot load model"):
        ExplainerModule(model_name_or_path=str(tmp_path / "nowhere")).configure_model()


@pytest.mark.parametrize(
    ("warmup", "total", "expected"),
    [
        (3, 8, [1 / 4, 2 / 4, 3 / 4, 5 / 5, 4 / 5, 3 / 5, 2 / 5, 1 / 5]),
        (0, 4, [4 / 4, 3 / 4, 2 / 4, 1 / 4]),
    ],
)
def test_warmup_starts_above_zero_and_decays_linearly_to_zero(warmup, total, expected):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = warmup_then_linear_decay(optimizer, warmup, total)
    seen = []
    for _ in range(total):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx(expected)


def test_a_resumed_run_with_a_longer_schedule_trains_at_the_new_schedules_rate(six_cause_pairs, tmp_path):
    """A finished 2-step run resumed for 4 steps: the restored schedule used to hold the rate at 0 (no weight moved)."""
    module = ExplainerModule(lr=1e-2, warmup_steps=0)
    trainer, _ = _fit(module, six_cause_pairs, steps=2, root=tmp_path / "first", enable_checkpointing=False)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    before = {n: p.detach().clone() for n, p in module.model.named_parameters() if p.requires_grad}
    resumed = ExplainerModule(lr=1e-2, warmup_steps=0)
    with pytest.warns(UserWarning, match="schedule of 4 steps .* had 2"):
        trainer, _ = _fit(resumed, six_cause_pairs, steps=4, root=tmp_path / "more", enable_checkpointing=False,
                          ckpt_path=str(path))  # fmt: skip
    assert trainer.global_step == 4
    after = dict(resumed.model.named_parameters())
    assert all(not torch.equal(before[n], after[n].detach()) for n in before)  # every trained weight moved
    # steps 2 and 3 of a 4-step decay: 2/4 and 1/4 of the rate; the rate after the last step is 0
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)


class _ScriptedCheck(L.Callback):
    """Logs a scripted held-out metric at each validation and keeps the trainable weights it was logged for."""

    def __init__(self, values: list[float]) -> None:
        self.values, self.states = values, []

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        pl_module.log("val/check", self.values[len(self.states)])
        self.states.append({n: p.detach().clone() for n, p in pl_module.named_parameters() if p.requires_grad})


def test_a_monitored_adapter_is_the_best_validations_not_the_last(six_cause_pairs, tmp_path):
    from safetensors.torch import load_file

    from nemo_train.explainer.distributed import clean_name

    module = ExplainerModule(lr=5e-3, modules_to_save=["lm_head"])
    scripted, best = _ScriptedCheck([0.2, 0.9, 0.5]), AdapterCheckpoint(monitor="val/check", on_checkpoint=False)
    _fit(module, six_cause_pairs, steps=6, root=tmp_path, callbacks=[scripted, best], val_check_interval=2,
         check_val_every_n_epoch=None, enable_checkpointing=False)  # fmt: skip
    assert len(scripted.states) == 3 and best.best_step == 4 and best.best_value == pytest.approx(0.9)
    written = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    for name, state in (("second", scripted.states[1]), ("last", scripted.states[2])):
        module.save_adapter(tmp_path / name, state_dict={clean_name(k): v for k, v in state.items()})
    second, last = (load_file(tmp_path / n / "adapter_model.safetensors") for n in ("second", "last"))
    assert written.keys() == second.keys() and all(torch.equal(written[k], second[k]) for k in written)
    assert not all(torch.equal(written[k], last[k]) for k in written)  # the run went on past its best
