"""The shipped Qwen2.5-VL, Qwen3-VL and Llama-3.2-Vision presets on tiny random checkpoints of those architectures.

Each preset, pointed at a tiny local checkpoint, fits two epochs with validation (4-bit QLoRA and bf16
LoRA, Lightning's sanity check on); its adapter reloads with ``PeftModel.from_pretrained`` and explains
8 images in one batch, through ``nemo-train explain`` and through the local chat backend.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from datamodules.explanations import IGNORE_INDEX, ConversationEncoder, read_records, to_pil
from nemo_train.backends.hf_local import HFLocalBackend
from nemo_train.backends.messages import user_message
from nemo_train.cli import run_lightning_cli, run_pipeline
from nemo_train.explainer import ExplainerModule
from nemo_train.explainer.generation import generate_explanations
from nemo_train.models.vlm import load_processor

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "explainer"
PRESETS = {
    "qwen2_5_vl": "qwen2_5_vl_7b_qlora.yaml",
    "qwen3_vl": "qwen3_vl_8b_qlora.yaml",
    "mllama": "llama3_2_11b_vision_qlora.yaml",
}
END = {"qwen2_5_vl": "<|im_end|>", "qwen3_vl": "<|im_end|>", "mllama": "<|eot_id|>"}


@pytest.mark.parametrize("family", PRESETS)
def test_labels_cover_exactly_the_answer_and_its_end_token(tiny_real, family):
    processor = load_processor(str(tiny_real[family]))
    encoder = ConversationEncoder(processor, max_length=512)
    answer = "The image is covered in random noise."
    sample = encoder.encode(to_pil(torch.rand(3, 28, 28)), "Why?", answer)
    labels = sample["labels"][0]
    kept = labels[labels != IGNORE_INDEX]
    assert processor.tokenizer.decode(kept) == answer + END[family]
    # one contiguous block; after it only the template's line break (Qwen) or nothing (Llama)
    where = (labels != IGNORE_INDEX).nonzero().flatten()
    assert torch.equal(where, torch.arange(int(where[0]), int(where[-1]) + 1))
    assert processor.tokenizer.decode(sample["input_ids"][0][int(where[-1]) + 1 :]).strip() == ""


def _eight_images(pairs: dict[str, Path]) -> list[str]:
    records = read_records(pairs["train"]) + read_records(pairs["val"])
    return [r.image for r in records[:8]]


@pytest.fixture(scope="module", params=[(f, q) for f in PRESETS for q in ("4bit", "bf16")], ids=lambda p: "-".join(p))
def fitted(request, tiny_real, six_cause_pairs, tmp_path_factory):
    """The preset fit for two epochs on a tiny checkpoint; returns (family, run folder)."""
    family, mode = request.param
    root = tmp_path_factory.mktemp(f"{family}_{mode}")
    model = str(tiny_real[family])
    args = [
        "fit",
        "--config",
        str(CONFIGS / PRESETS[family]),
        "--trainer.accelerator=cpu",
        "--trainer.logger=false",
        "--trainer.max_epochs=2",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={root}",
        f"--model.init_args.model_name_or_path={model}",
        f"--model.init_args.load_in_4bit={mode == '4bit'}",
        f"--data.init_args.model_name_or_path={model}",
        f"--data.init_args.train_jsonl={six_cause_pairs['train']}",
        f"--data.init_args.val_jsonl={six_cause_pairs['val']}",
        "--data.init_args.num_workers=0",
        "--data.init_args.max_length=512",
    ]
    run_lightning_cli(args)  # every output under --trainer.default_root_dir
    return family, mode, root / "checkpoints", root / "adapter"


def test_preset_fits_two_epochs_with_validation_and_writes_a_loadable_adapter(fitted, six_cause_pairs, tmp_path):
    family, mode, checkpoints, adapter = fitted
    best = torch.load(checkpoints / "best.ckpt", weights_only=True, map_location="cpu")
    assert best["epoch"] in (0, 1) and best["state_dict"]  # monitored val/explanation_acc: the callback ran
    assert any("lora_B" in k for k in best["state_dict"])
    meta = json.loads((adapter / "nemo_explainer.json").read_text())
    assert meta["load_in_4bit"] is (mode == "4bit")
    # the adapter reloads (PeftModel.from_pretrained) with the trained weights
    reloaded = ExplainerModule.from_adapter(adapter)
    state = {k: v for k, v in reloaded.state_dict().items() if "lora_B" in k}
    assert state and any(v.abs().sum() > 0 for v in state.values())  # LoRA B starts at zero; training moved it
    images = _eight_images(six_cause_pairs)
    texts = generate_explanations(reloaded, images, max_new_tokens=6, batch_size=8)
    assert len(texts) == 8 and all(len(t) == 1 and isinstance(t[0], str) for t in texts)


def test_explain_command_and_chat_backend_generate_for_eight_images_at_once(fitted, six_cause_pairs, tmp_path):
    family, mode, _, adapter = fitted
    if mode != "bf16":
        pytest.skip("one generation check per family is enough")
    images = _eight_images(six_cause_pairs)
    output = tmp_path / "explanations.jsonl"
    run_pipeline(
        "explain",
        [
            "--model",
            str(adapter),
            "--images",
            json.dumps(images),
            "--out_dir",
            str(tmp_path),
            "--generation.batch_size=8",
            "--generation.max_new_tokens=5",
        ],
    )
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["image"] for r in rows] == images
    backend = HFLocalBackend(adapter, device="cpu", batch_size=8, dtype="float32")
    replies = backend.chat_batch([[user_message("Why?", [to_pil(i)])] for i in images], max_tokens=5)
    assert len(replies) == 8 and backend.stats.requests == 8
