"""``nemo-train export``: a fine-tuned explainer as a model folder that transformers and serving engines load.

The merged export folds the LoRA weights into the base model and writes a plain transformers folder
(safetensors weights, config, generation config, processor with its chat template) and a model card; an
OpenAI-compatible server (vLLM, ``vllm serve <folder>``) serves it as trained, vision-tower LoRA included.
The adapter-only export copies the peft adapter for engines that apply LoRA to a served base model; since
those apply it to the language model only, it is refused when the adapter touches the vision tower.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from safetensors import safe_open

from nemo_train.backends.student import check_adapter_folder
from nemo_train.errors import UserInputError
from nemo_train.explainer.module import DType, ExplainerModule, is_visual, set_kv_cache
from nemo_train.models.vlm import EXPLAINER_META
from nemo_train.runs import RUN_FLOOR_FILES, OutDir, run_command
from nemo_train.store import disk_errors, write_bytes_atomic

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
#: Where an export is written before it is moved into ``out_dir`` whole (a killed run leaves it there).
STAGE = ".export-unfinished"


def _read_adapter(adapter: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(explainer meta, peft config, names of the adapter's tensors)."""
    missing = [name for name in (EXPLAINER_META, *ADAPTER_FILES) if not (adapter / name).is_file()]
    if missing:
        raise UserInputError(
            f"adapter={str(adapter)!r} lacks {', '.join(missing)}; expected a folder written by training (<run>/adapter)"
        )
    check_adapter_folder(adapter, "adapter")  # damaged JSON or weights cut short: the one line explain gives
    meta = json.loads((adapter / EXPLAINER_META).read_text())
    config = json.loads((adapter / "adapter_config.json").read_text())
    with safe_open(str(adapter / "adapter_model.safetensors"), framework="pt") as weights:
        names = list(weights.keys())
    return meta, config, names


def vision_weights(names: list[str]) -> list[str]:
    """The adapter tensors that belong to the vision tower."""
    return [n for n in names if is_visual(n)]


def model_card(meta: dict[str, Any], config: dict[str, Any], adapter: Path, merged: bool, base_dtype: str) -> str:
    """A model card (README.md with a metadata header) naming the base model, LoRA, training data and metrics."""
    base = meta["model_name_or_path"]
    data = meta.get("training_data") or {}
    metrics = meta.get("metrics") or {}
    prompting = meta.get("prompting") or {}
    lines = [
        "---",
        f"base_model: {base}",
        "library_name: transformers" if merged else "library_name: peft",
        "pipeline_tag: image-text-to-text",
        "tags: [nemo-train, explainer, lora]",
        "---",
        "",
        f"# Explainer of classifier errors fine-tuned from {base}",
        "",
        (
            f"LoRA merged into the base weights ({base_dtype}); load with `AutoModelForImageTextToText` and "
            "`AutoProcessor`, or serve the folder with an OpenAI-compatible server."
            if merged
            else "A LoRA adapter of the language model only (no vision-tower weights), for engines that apply "
            "LoRA adapters to a served base model."
        ),
        "",
        "## Fine-tuning",
        "",
        f"- adapter: `{adapter}`" + (f" (step {meta['global_step']})" if "global_step" in meta else ""),
        f"- LoRA: r {config.get('r')}, alpha {config.get('lora_alpha')}, targets `{config.get('target_modules')}`",
        f"- trained on a 4-bit (nf4) base: {bool(meta.get('load_in_4bit'))}"
        + ("; merged here into the unquantized base" if merged and meta.get("load_in_4bit") else ""),
        f"- training data: {', '.join(f'{k} `{v}`' for k, v in data.items()) if data else 'not recorded'}",
        "",
        "## Metrics at the last save",
        "",
    ]
    if metrics:
        lines += ["| metric | value |", "| --- | --- |", *(f"| {k} | {v:.4g} |" for k, v in sorted(metrics.items()))]
        lines += ["", "`val/explanation_acc` is graded by a keyword rule over the cause vocabulary, not by a model."]
    else:
        lines.append("not recorded (the adapter was saved outside a fit)")
    if prompting:
        lines += ["", "## Prompting it was trained with", "", "```json", json.dumps(prompting, indent=2), "```"]
    return "\n".join(lines) + "\n"


@run_command("export")
def export(
    adapter: str, out_dir: OutDir = "checkpoints/export", adapter_only: bool = False, dtype: DType | None = None
) -> Path:
    """Write a fine-tuned explainer as a folder that transformers and serving engines load.

    Args:
        adapter: the adapter folder a fit wrote (``<default_root_dir>/adapter``).
        adapter_only: write the peft adapter alone (language-model LoRA only: refused when it touches the
            vision tower) instead of the merged model.
        dtype: dtype of the merged weights (default: the dtype the explainer was trained in).
    """
    source, out = Path(adapter), Path(out_dir)
    meta, config, names = _read_adapter(source)
    stage = out / STAGE
    if (stage / "README.md").is_file():  # a run killed while it moved the finished files in: finish the move
        return _publish(stage, out)
    if any(p.name not in (*RUN_FLOOR_FILES, STAGE) for p in out.iterdir()):  # the run floor made the folder
        raise UserInputError(f"out_dir={out_dir!r} is not empty; export into a new or empty folder")
    shutil.rmtree(stage, ignore_errors=True)  # what a killed run had begun to write
    if adapter_only:
        vision = vision_weights(names)
        if vision:
            raise UserInputError(
                f"adapter-only export refused: the LoRA touches the vision tower ({len(vision)} tensors, e.g. "
                f"{vision[0]}), which engines serving LoRA on the language model ignore; export the merged model "
                "or train with language_only: true"
            )
        stage.mkdir(parents=True)
        for name in ADAPTER_FILES:
            with disk_errors(stage / name):
                shutil.copy2(source / name, stage / name)
        card = model_card(meta, config, source, merged=False, base_dtype="")
        write_bytes_atomic(stage / "README.md", card.encode("utf-8"))
        return _publish(stage, out)
    base_dtype = dtype or meta.get("torch_dtype", "float32")
    module = ExplainerModule(model_name_or_path=meta["model_name_or_path"], adapter=str(source), torch_dtype=base_dtype)
    module.configure_model()  # unquantized: merging into 4-bit weights would round the LoRA update away
    model = module.model.merge_and_unload()
    set_kv_cache(model, True)  # off while training; generation and serving want it
    stage.mkdir(parents=True)
    with disk_errors(stage / "model.safetensors"):  # a full disk inside transformers' writers: one line
        model.save_pretrained(stage)
        module.processor.save_pretrained(stage)  # tokenizer, image processor and chat template
    card = model_card(meta, config, source, merged=True, base_dtype=base_dtype)
    write_bytes_atomic(stage / "README.md", card.encode("utf-8"))  # the card last: it marks the export whole
    _publish(stage, out)
    print(f"wrote the merged explainer to {out}")
    return out


def _publish(stage: Path, out: Path) -> Path:
    """Move the finished export from ``stage`` into ``out`` (one rename a file; the model card, written last into
    ``stage``, says the export is whole, so a rerun after a kill here finishes the move)."""
    for path in sorted(stage.iterdir(), key=lambda p: (p.name == "README.md", p.name)):  # the card last
        path.replace(out / path.name)
    stage.rmdir()
    return out
