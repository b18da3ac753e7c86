"""Sharded-training support checked on CPU: clean names under wrappers, the adapter written from a
gathered state dict, the FSDP wrap policy from ``_no_split_modules``, and 4-bit ``modules_to_save``."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.fsdp.wrap import _recursive_wrap
from transformers import AutoModelForImageTextToText

from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule
from nemo_train.explainer.distributed import NoSplitModulesPolicy, clean_name, generation_context
from nemo_train.explainer.quantization import check_modules_to_save
from nemo_train.models.vlm import resolve_model_path


class FakeFSDPUnit(torch.nn.Module):
    """Stands in for an FSDP unit: the wrapped module under ``_fsdp_wrapped_module`` (FSDP's attribute name)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self._fsdp_wrapped_module = module

    def forward(self, *args, **kwargs):
        return self._fsdp_wrapped_module(*args, **kwargs)


def _wrap_decoder_layers(module: ExplainerModule) -> None:
    layers = module.model.base_model.model.model.language_model.layers
    for i in range(len(layers)):
        layers[i] = FakeFSDPUnit(checkpoint_wrapper(layers[i]))
    lm = module.model.base_model.model
    lm.lm_head = FakeFSDPUnit(lm.lm_head)


def _lora_module(explainer_cache) -> ExplainerModule:
    module = ExplainerModule(modules_to_save=["lm_head"], lora_r=2)
    module.configure_model()
    with torch.no_grad():  # non-zero LoRA B, so a lost weight shows
        for name, p in module.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)
    return module


def test_clean_names_find_every_trainable_weight_under_wrappers(explainer_cache):
    module = _lora_module(explainer_cache)
    expected = set(module.trainable_parameter_names())
    _wrap_decoder_layers(module)
    raw = {n for n, p in module.named_parameters() if p.requires_grad}
    assert any("_fsdp_wrapped_module." in n and "_checkpoint_wrapped_module." in n for n in raw)
    assert set(module.trainable_parameter_names()) == expected  # the filter sees clean names
    # a checkpoint filtered from a wrapped-name state dict keeps every trainable weight, by clean name
    checkpoint = {"state_dict": dict(module.state_dict())}
    module.on_save_checkpoint(checkpoint)
    assert set(checkpoint["state_dict"]) == expected
    assert clean_name("a._fsdp_wrapped_module.b._checkpoint_wrapped_module.c") == "a.b.c"


def test_adapter_from_a_gathered_state_dict_round_trips(explainer_cache, tmp_path):
    module = _lora_module(explainer_cache)
    trained = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    _wrap_decoder_layers(module)
    # what rank 0 holds after a full-state-dict gather: clean names, whole tensors (not the live parameters)
    gathered = {k: v.clone() for k, v in trained.items()}
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p.zero_()  # the local (sharded) view is not what gets written
    folder = module.save_adapter(tmp_path / "adapter", state_dict=gathered)
    base = AutoModelForImageTextToText.from_pretrained(resolve_model_path(module.hparams.model_name_or_path))
    loaded = PeftModel.from_pretrained(base, folder)
    params = dict(loaded.named_parameters())
    for name, value in trained.items():
        key = name.removeprefix("model.")
        assert torch.equal(params[key].detach(), value), name


@pytest.mark.parametrize(
    "family, expected",
    [
        ("qwen2_5_vl", {"Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock"}),
        ("qwen3_vl", {"Qwen3VLTextDecoderLayer", "Qwen3VLVisionBlock"}),
        (
            "mllama",
            {"MllamaSelfAttentionDecoderLayer", "MllamaCrossAttentionDecoderLayer", "MllamaVisionEncoderLayer"},
        ),
    ],
)
def test_wrap_policy_units_follow_no_split_modules(tiny_real, family, expected):
    model = AutoModelForImageTextToText.from_pretrained(tiny_real[family])
    policy = NoSplitModulesPolicy()
    assert policy(model, recurse=True)  # FSDP asks about the root first: the policy reads the classes there
    wrapped = {type(m).__name__ for m in model.modules() if policy(m, recurse=False)}
    assert wrapped == expected
    # torch's own wrapping recursion (what FSDP and activation checkpointing run), with a stand-in unit
    fresh = AutoModelForImageTextToText.from_pretrained(tiny_real[family])
    _recursive_wrap(fresh, NoSplitModulesPolicy(), FakeFSDPUnit, set(), set(), only_wrap_children=True)
    units = [m for m in fresh.modules() if isinstance(m, FakeFSDPUnit)]
    assert len(units) >= 4 and {type(u._fsdp_wrapped_module).__name__ for u in units} == expected


def test_generation_context_is_plain_on_one_device():
    with generation_context(None) as kwargs:
        assert kwargs == {}


def test_quantized_module_to_save_is_one_line(explainer_cache):
    pytest.importorskip("bitsandbytes")
    module = ExplainerModule(load_in_4bit=True)  # nothing to save in full: the vision tower is quantized
    base = module._load_base()
    with pytest.raises(UserInputError, match="modules_to_save entry 'visual' holds .* 4-bit weight"):
        check_modules_to_save(base, ["visual"])
    # asked for in modules_to_save, the tower is kept unquantized and trains
    trained = ExplainerModule(load_in_4bit=True, modules_to_save=["visual", "lm_head"])
    trained.configure_model()
    names = trained.trainable_parameter_names()
    assert any(".visual." in n and "modules_to_save" in n for n in names)
