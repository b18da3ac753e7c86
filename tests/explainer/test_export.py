"""``nemo-train export`` on tiny random Qwen2.5-VL and Llama-3.2-Vision: the merged folder reloads with
transformers alone (AutoModelForImageTextToText + AutoProcessor) and answers greedily as the adapter does;
adapter-only export is refused for vision-tower LoRA and written for ``language_only`` LoRA."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForImageTextToText, AutoProcessor

from datamodules.explanations import to_pil
from nemo_train.cli import run_pipeline
from nemo_train.errors import UserInputError
from nemo_train.explainer import VISION_LANGUAGE_TARGETS, ExplainerModule
from nemo_train.explainer.export import export
from nemo_train.explainer.generation import generate_explanations
from tests.explainer.fsdp_run import PRESETS

QUESTION = "Why was this image misclassified?"


def _adapter(model_path, folder, **kwargs):
    """An adapter with random non-zero LoRA weights (LoRA B starts at zero), saved as a fit saves it."""
    module = ExplainerModule(model_name_or_path=str(model_path), lora_r=4, **kwargs)
    module.configure_model()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * 0.2)
    module._trainer = SimpleNamespace(  # what save_adapter reads of a fit: the pair files and the metrics
        datamodule=SimpleNamespace(hparams={"train_jsonl": "pairs/train.jsonl", "val_jsonl": "pairs/val.jsonl"}),
        callback_metrics={"val/explanation_acc": torch.tensor(0.625)},
        global_step=40,
    )
    return module.save_adapter(folder)


def _transformers_answer(folder, image) -> str:
    """A greedy answer from the exported folder with transformers only."""
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    bos = processor.tokenizer.bos_token
    inputs = processor(
        text=[text],
        images=[[to_pil(image)]],
        return_tensors="pt",
        add_special_tokens=not (bos and text.startswith(bos)),
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    return processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@pytest.mark.parametrize("family", PRESETS)
def test_merged_export_reloads_to_the_adapters_greedy_answers(family, tiny_real, tmp_path):
    adapter = _adapter(tiny_real[family], tmp_path / "adapter", lora_targets=VISION_LANGUAGE_TARGETS)
    out = tmp_path / "merged"
    run_pipeline("export", ["--adapter", str(adapter), "--out_dir", str(out)])
    images = [torch.rand(3, 28, 28, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    expected = generate_explanations(ExplainerModule.from_adapter(adapter), images, prompts=QUESTION, max_new_tokens=8)
    answers = [_transformers_answer(out, image) for image in images]
    assert all(answers) and answers == [e[0] for e in expected]
    assert not (out / "nemo_explainer.json").exists()  # a plain model folder, not an adapter
    config = AutoModelForImageTextToText.from_pretrained(out).config
    assert config.get_text_config().use_cache  # off while training, on for serving
    card = (out / "README.md").read_text()
    assert str(tiny_real[family]) in card and "pairs/train.jsonl" in card and "| val/explanation_acc | 0.625 |" in card


def test_adapter_only_export_refuses_vision_lora_and_writes_language_lora(tiny_real, tmp_path):
    model = tiny_real["qwen2_5_vl"]
    vision = _adapter(model, tmp_path / "vision", lora_targets=VISION_LANGUAGE_TARGETS)
    with pytest.raises(UserInputError, match=r"adapter-only export refused: the LoRA touches the vision tower"):
        export(str(vision), str(tmp_path / "refused"), adapter_only=True)
    assert not (tmp_path / "refused").exists()
    language = _adapter(model, tmp_path / "language", lora_targets=VISION_LANGUAGE_TARGETS, language_only=True)
    out = export(str(language), str(tmp_path / "served"), adapter_only=True)
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as weights:
        names = list(weights.keys())
    assert names and all(".language_model." in n for n in names)
    assert "library_name: peft" in (out / "README.md").read_text()
    with pytest.raises(UserInputError, match="is not empty; export into a new or empty folder"):
        export(str(language), str(out), adapter_only=True)


def test_language_only_keeps_lora_and_saved_modules_out_of_the_vision_tower(tiny_real):
    module = ExplainerModule(
        model_name_or_path=str(tiny_real["mllama"]), lora_targets=VISION_LANGUAGE_TARGETS, language_only=True
    )
    names = module.trainable_parameter_names()
    assert names and not any("vision_model" in n for n in names)
    with pytest.raises(UserInputError, match="language_only=True but modules_to_save"):
        ExplainerModule(language_only=True, modules_to_save=["visual", "lm_head"])


@pytest.mark.fault
def test_an_export_killed_before_its_end_is_finished_by_the_rerun(tiny_real, tmp_path):
    """The export is written into ``<out_dir>/.export-unfinished`` and moved in whole, the model card last: a
    rerun after a kill while writing starts again, one after a kill while moving finishes the move; either way
    the folder ends byte for byte equal to an uninterrupted export's."""
    from nemo_train.explainer.export import STAGE

    adapter = _adapter(tiny_real["qwen2_5_vl"], tmp_path / "adapter", lora_targets=VISION_LANGUAGE_TARGETS)
    reference = export(str(adapter), str(tmp_path / "reference"))
    files = {p.name: p.read_bytes() for p in reference.iterdir() if p.name != "provenance.json"}

    def contents(folder):
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "provenance.json"}

    writing = tmp_path / "killed_while_writing"  # half a weights file in the stage, nothing moved yet
    (writing / STAGE).mkdir(parents=True)
    (writing / STAGE / "model.safetensors").write_bytes(files["model.safetensors"][:100])
    export(str(adapter), str(writing))
    assert contents(writing) == files

    moving = tmp_path / "killed_while_moving"  # a whole stage, two files already moved in
    (moving / STAGE).mkdir(parents=True)
    for name, data in files.items():
        (moving / STAGE / name).write_bytes(data)
    for name in sorted(n for n in files if n != "README.md")[:2]:
        (moving / STAGE / name).replace(moving / name)
    export(str(adapter), str(moving))
    assert contents(moving) == files
