"""``ExplainerModule``: LoRA / QLoRA fine-tuning of a multimodal LLM on image-explanation pairs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from peft.utils import SAFETENSORS_WEIGHTS_NAME as SAFE_WEIGHTS_NAME
from safetensors.torch import save_file
from torch.optim.lr_scheduler import LambdaLR, LRScheduler
from transformers import BitsAndBytesConfig
from transformers.integrations import HfDeepSpeedConfig

from nemo_train.errors import UserInputError
from nemo_train.explainer.distributed import adapter_keys, adapter_state_dict, clean_name, trainable_names, zero_stage
from nemo_train.explainer.quantization import (
    check_modules_to_save,
    keep_training_layout,
    skip_patterns,
)
from nemo_train.models.vlm import (
    EXPLAINER_META,
    TINY_MODEL,
    attach_adapter,
    load_processor,
    load_vlm,
    read_explainer_meta,
)

#: LoRA targets: attention and MLP projections of the language model only (the default).
LANGUAGE_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
#: LoRA targets: the above plus the attention / MLP linears of the vision blocks of Qwen2-VL / Qwen2.5-VL /
#: Qwen3-VL (``visual.blocks.N``) and Llama-3.2-Vision (``vision_model.*.layers.N``), never the patch embedding.
VISION_LANGUAGE_TARGETS = (
    r".*(language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
    r"|visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(fc1|fc2|linear_fc1|linear_fc2|gate_proj|up_proj|down_proj))"
    r"|vision_model\.(transformer|global_transformer)\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(fc1|fc2)))"
)
#: Vision-tower module names (Qwen2-VL / Qwen2.5-VL / Qwen3-VL ``visual``, Llama-3.2-Vision ``vision_model``,
#: LLaVA-style ``vision_tower``): kept out of LoRA with ``language_only``.
VISION_MODULES = r".*(\bvisual|vision_model|vision_tower)\..*"
#: Modules kept in full precision under 4-bit loading: the output head and the vision-language projectors
#: (Qwen3-VL also projects intermediate vision features: ``deepstack_merger_list``).
DEFAULT_QUANT_SKIP = [
    "lm_head",
    r".*visual\.merger",
    r".*visual\.deepstack_merger_list",
    r".*multi_modal_projector",
    r".*connector",
]

DType = Literal["float32", "bfloat16", "float16"]


def batch_size_of(batch: dict[str, torch.Tensor]) -> int:
    """Conversations in a batch (``ThroughputMonitor(batch_size_fn=...)``)."""
    return int(batch["input_ids"].shape[0])


def tokens_of(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens in a batch (``ThroughputMonitor(length_fn=...)``: items/s become tokens/s)."""
    return int(batch["attention_mask"].sum())


class ExplainerModule(L.LightningModule):
    """A multimodal LLM (anything ``AutoModelForImageTextToText`` loads) fine-tuned with LoRA to explain errors.

    The model is built in :meth:`configure_model` (so FSDP / DeepSpeed can shard it at creation; under
    DeepSpeed ZeRO-3 transformers' ``HfDeepSpeedConfig`` is active while the weights load, so they are
    loaded into the partitions). LoRA (peft) hits the modules whose names fully match ``lora_targets`` (a
    regex; language-only by default); ``modules_to_save`` trains whole modules too (kept unquantized).
    ``load_in_4bit`` loads the base through transformers' ``BitsAndBytesConfig`` (nf4, double
    quantization, ``compute_dtype``; ``quant_skip_modules`` stay unquantized). Lightning checkpoints hold
    only the trainable weights; the peft adapter is written by
    :class:`nemo_train.callbacks.adapter_checkpoint.AdapterCheckpoint`.

    Args:
        model_name_or_path: hub id, local folder, or ``embedded:tiny-qwen2-vl`` (built locally, random init).
        adapter: a saved adapter folder to start from (resume fine-tuning or load for inference).
        lora_r, lora_alpha, lora_dropout: LoRA rank, scale and dropout (16, 16, 0 in the published recipe).
        lora_targets: regex over module names, e.g. :data:`LANGUAGE_TARGETS` or :data:`VISION_LANGUAGE_TARGETS`.
        language_only: keep LoRA (and ``modules_to_save``) out of the vision tower whatever ``lora_targets``
            matches (:data:`VISION_MODULES`): an adapter that serving engines applying LoRA to the language
            model only (vLLM) serve as trained.
        modules_to_save: module names trained in full (e.g. ``["visual", "lm_head"]`` for a random-init model).
        load_in_4bit: QLoRA; ``quant_storage_dtype`` must equal ``compute_dtype`` under FSDP.
        gradient_checkpointing: recompute activations (``use_reentrant=False``).
        lr, weight_decay, warmup_steps: AdamW with linear warm-up then linear decay to zero
            (:func:`warmup_then_linear_decay`).
        visual_lr: learning rate of the trained vision-tower parameters (names with ``visual`` or
            ``vision``; default ``lr``). A random-init vision tower trained in full learns faster with a
            lower rate than the LoRA weights (the tiny model: ``lr`` / 6).
        torch_dtype: dtype the unquantized weights are loaded in.
        attn_implementation: passed to ``from_pretrained``.
    """

    def __init__(
        self,
        model_name_or_path: str = TINY_MODEL,
        adapter: str | None = None,
        lora_r: int = 16,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        lora_targets: str = LANGUAGE_TARGETS,
        language_only: bool = False,
        modules_to_save: list[str] | None = None,
        load_in_4bit: bool = False,
        compute_dtype: DType = "float32",
        quant_storage_dtype: DType | None = None,
        quant_skip_modules: list[str] | None = None,
        gradient_checkpointing: bool = False,
        lr: float = 2e-4,
        visual_lr: float | None = None,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        torch_dtype: DType = "float32",
        attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = "sdpa",
    ) -> None:
        super().__init__()
        if lora_r < 1:
            raise UserInputError(f"lora_r={lora_r}; expected a rank of at least 1")
        if not 0.0 <= lora_dropout < 1.0:
            raise UserInputError(f"lora_dropout={lora_dropout}; expected a value in [0, 1)")
        if lr <= 0 or (visual_lr is not None and visual_lr <= 0):
            raise UserInputError(f"lr={lr}, visual_lr={visual_lr}; expected positive learning rates")
        if warmup_steps < 0:
            raise UserInputError(f"warmup_steps={warmup_steps}; expected 0 or more")
        vision_saved = [m for m in modules_to_save or [] if is_visual(m + ".")]
        if language_only and vision_saved:
            raise UserInputError(f"language_only=True but modules_to_save={vision_saved} trains the vision tower")
        self.save_hyperparameters()
        self.model: torch.nn.Module | None = None
        self.processor: Any = None
        self.prompting: dict[str, Any] = {}
        self.strict_loading = False  # checkpoints hold only the trainable weights
        self.flops_per_batch = None  # ThroughputMonitor: samples/s and tokens/s only (batches vary in length)
        self._hf_deepspeed_config: Any = None  # kept alive while ZeRO-3 loads the weights

    # ------------------------------------------------------------------------------------------ model

    def quantization_config(self) -> BitsAndBytesConfig:
        """The ``BitsAndBytesConfig`` used when ``load_in_4bit`` (nf4, double quantization).

        ``modules_to_save`` are added to the skip list: a module trained in full cannot be quantized.
        """
        hp = self.hparams
        skip = list(hp.quant_skip_modules or DEFAULT_QUANT_SKIP) + skip_patterns(hp.modules_to_save)
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=getattr(torch, hp.compute_dtype),
            bnb_4bit_quant_storage=getattr(torch, hp.quant_storage_dtype) if hp.quant_storage_dtype else torch.uint8,
            llm_int8_skip_modules=skip,
        )

    def lora_config(self) -> LoraConfig:
        """The peft ``LoraConfig`` built from the hyper-parameters."""
        hp = self.hparams
        return LoraConfig(
            r=hp.lora_r,
            lora_alpha=hp.lora_alpha,
            lora_dropout=hp.lora_dropout,
            target_modules=hp.lora_targets,
            exclude_modules=VISION_MODULES if hp.get("language_only") else None,
            modules_to_save=list(hp.modules_to_save) if hp.modules_to_save else None,
        )

    def _load_base(self) -> torch.nn.Module:
        hp = self.hparams
        kwargs: dict[str, Any] = {"dtype": getattr(torch, hp.torch_dtype)}
        if hp.attn_implementation:
            kwargs["attn_implementation"] = hp.attn_implementation
        if hp.load_in_4bit:
            kwargs["quantization_config"] = self.quantization_config()
            device = self.trainer.strategy.root_device if self._trainer is not None else torch.device("cpu")
            kwargs["device_map"] = {"": str(device)}
        if zero_stage(self._trainer) == 3:
            self._hf_deepspeed_config = HfDeepSpeedConfig(self.trainer.strategy.config)
        return load_vlm(hp.model_name_or_path, **kwargs)

    def configure_model(self) -> None:
        """Load the base model, prepare it for k-bit training / checkpointing, and add (or load) the adapter."""
        if self.model is not None:
            return
        hp = self.hparams
        base = self._load_base().train()  # from_pretrained returns eval mode; Lightning keeps module modes
        checkpointing = {"use_reentrant": False}
        if hp.load_in_4bit:
            keep_training_layout(base)  # one weight layout for evaluation and training on CPU
            check_modules_to_save(base, hp.modules_to_save)
            base = prepare_model_for_kbit_training(
                base, use_gradient_checkpointing=hp.gradient_checkpointing, gradient_checkpointing_kwargs=checkpointing
            )
        elif hp.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
            base.enable_input_require_grads()
        set_kv_cache(base, False)  # training never reuses keys; a cache would grow again in every recomputation
        if hp.adapter:
            self.model = attach_adapter(base, hp.adapter, trainable=True)
        else:
            try:
                self.model = get_peft_model(base, self.lora_config())
            except ValueError as err:
                raise UserInputError(
                    f"lora_targets={hp.lora_targets!r} matches no module of {hp.model_name_or_path!r}: {err}"
                ) from None
        self.processor = load_processor(hp.adapter or hp.model_name_or_path)
        adapter_keys(self.model)  # the adapter file's keys, read before FSDP wraps the model (then a collective)

    def trainable_parameter_names(self) -> list[str]:
        """Clean names (in this module's ``state_dict``, wrapper segments removed) of the trained parameters."""
        self.configure_model()
        return sorted(trainable_names(self))

    # --------------------------------------------------------------------------------------- training

    def forward(self, **inputs: torch.Tensor) -> Any:
        """The wrapped model's output (``loss`` when ``labels`` are given, ``logits``)."""
        return self.model(**inputs)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self(**batch).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=batch_size_of(batch))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss = self(**batch).loss
        self.log("val/loss", loss, prog_bar=True, batch_size=batch_size_of(batch), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        groups = [{"params": [p for n, p in named if not is_visual(n)], "lr": hp.lr}]
        visual = [p for n, p in named if is_visual(n)]
        if visual:
            groups.append({"params": visual, "lr": hp.lr if hp.visual_lr is None else hp.visual_lr})
        optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=hp.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches)) if self._trainer is not None else 1
        self.schedule_steps = total
        resumed = getattr(self, "_resumed_schedule_steps", None)
        if resumed is not None and resumed != total:
            rank_zero_warn(
                f"resuming with a learning-rate schedule of {total} steps (the checkpoint's run had {resumed}): "
                f"from step {self.trainer.global_step} the rate follows the new length",
                category=UserWarning,
            )
        scheduler = warmup_then_linear_decay(optimizer, min(hp.warmup_steps, total - 1), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        """The learning rate of the step the run starts at, from the schedule (a resumed run's optimizer state
        holds the rate its last run ended with, 0 at the end of a finished schedule)."""
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, LambdaLR):
                for group, base, factor in zip(
                    scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas
                ):
                    group["lr"] = base * factor(scheduler.last_epoch)

    def on_fit_start(self) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and hasattr(datamodule, "prompt_settings"):
            self.prompting = datamodule.prompt_settings()

    # ------------------------------------------------------------------------------------ checkpoints

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep only the trainable weights in the checkpoint (names compared without wrapper segments)."""
        trainable = set(self.trainable_parameter_names())
        state = checkpoint.get("state_dict")
        if state is not None:
            checkpoint["state_dict"] = {clean_name(k): v for k, v in state.items() if clean_name(k) in trainable}
        checkpoint["explainer_prompting"] = dict(self.prompting)
        checkpoint["explainer_schedule_steps"] = getattr(self, "schedule_steps", None)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        self.prompting = dict(checkpoint.get("explainer_prompting", {}))
        self._resumed_schedule_steps = checkpoint.get("explainer_schedule_steps")

    def save_adapter(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """Write the peft adapter (safetensors), the processor and the base model's name to ``path``.

        ``state_dict`` (this module's clean names, e.g. gathered from shards) replaces the live weights.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if state_dict is None:
            state_dict = {clean_name(n): p for n, p in self.named_parameters() if p.requires_grad}
        state = {k.removeprefix("model."): v for k, v in state_dict.items()}
        save_file(adapter_state_dict(self.model, state), path / SAFE_WEIGHTS_NAME, metadata={"format": "pt"})
        config = self.model.peft_config["default"]
        inference_mode, config.inference_mode = config.inference_mode, True
        config.save_pretrained(path)
        config.inference_mode = inference_mode
        self.processor.save_pretrained(path)
        hp = self.hparams
        meta = {
            "model_name_or_path": hp.model_name_or_path,
            "load_in_4bit": hp.load_in_4bit,
            "compute_dtype": hp.compute_dtype,
            "torch_dtype": hp.torch_dtype,
            "prompting": self.prompting,
            **self._run_record(),
        }
        (path / EXPLAINER_META).write_text(json.dumps(meta, indent=2))
        return path

    def _run_record(self) -> dict[str, Any]:
        """What the adapter was trained on and how it scored, when saved during a fit: the datamodule's pair
        files and the trainer's scalar metrics (read by the exported model card)."""
        trainer = self._trainer
        if trainer is None:
            return {}
        data = getattr(getattr(trainer, "datamodule", None), "hparams", {}) or {}
        files = {k: str(data[k]) for k in ("train_jsonl", "val_jsonl") if data.get(k)}
        metrics = {k: float(v) for k, v in getattr(trainer, "callback_metrics", {}).items() if v.numel() == 1}
        return {"training_data": files, "metrics": metrics, "global_step": int(getattr(trainer, "global_step", 0))}

    @classmethod
    def from_adapter(cls, path: str | Path, load_in_4bit: bool | None = None, merge: bool = False) -> ExplainerModule:
        """Rebuild an explainer from :meth:`save_adapter` output, in eval mode; ``merge`` folds LoRA into the base."""
        path = Path(path)
        meta = read_explainer_meta(path)
        module = cls(
            model_name_or_path=meta["model_name_or_path"],
            adapter=str(path),
            load_in_4bit=meta["load_in_4bit"] if load_in_4bit is None else load_in_4bit,
            compute_dtype=meta.get("compute_dtype", "float32"),
            torch_dtype=meta.get("torch_dtype", "float32"),
        )
        module.configure_model()
        module.prompting = meta.get("prompting", {})
        if merge:
            module.merge()
        return module.eval()

    def merge(self) -> None:
        """Fold the LoRA weights into the base model (faster inference; no further adapter training)."""
        self.model = self.model.merge_and_unload()


def set_kv_cache(model: torch.nn.Module, enabled: bool) -> None:
    """Set ``use_cache`` on the model's config and on each of its sub-configs (text, vision) that has it.

    Multimodal models read ``use_cache`` from their language model's config (transformers 5 keeps none at
    the top level). Left on, every training forward fills a KV cache, and activation checkpointing
    that transformers does not manage (FSDP's ``activation_checkpointing_policy``) recomputes each
    decoder layer with the same cache object: the keys are appended twice and attention fails on the
    doubled length (or, without padding, attends to the duplicates). ``generate`` is unaffected: it
    takes ``use_cache`` from the generation config.
    """
    configs = [model.config]
    configs += [getattr(model.config, k) for k in getattr(model.config, "sub_configs", {}) if hasattr(model.config, k)]
    for config in configs:
        if config is not None and "use_cache" in config.to_dict():
            config.use_cache = enabled


def is_visual(name: str) -> bool:
    """Whether a parameter belongs to the vision tower (Qwen2-VL ``visual``, Llama-3.2-Vision ``vision_model``)."""
    return ".visual." in f".{name}" or "vision_model." in name


def warmup_then_linear_decay(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> LRScheduler:
    """Linear warm-up over ``warmup`` steps, then linear decay to zero at step ``total``.

    A closed form of the step (torch's ``LambdaLR`` over a plain function, whose ``state_dict`` keeps the step
    but not the lengths): a run resumed with another ``total`` follows the new length from the step it resumes
    at, instead of the restored schedule of the first run. The first step already trains, at ``1 / (warmup + 1)``
    of the learning rate (step ``s < warmup`` uses ``(s + 1) / (warmup + 1)``); the decay uses
    ``(total - s) / (total - warmup)``, and 0 from step ``total`` on.
    """
    warmup = max(0, warmup)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return LambdaLR(optimizer, factor)
