"""A backend running a local Hugging Face image-text-to-text model (optionally with a LoRA adapter)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from nemo_train.errors import UserInputError
from nemo_train.nemo.backends.base import ChatBackend
from nemo_train.nemo.backends.messages import Message, to_local_messages


class HFLocalBackend(ChatBackend):
    """Chat with a local ``AutoModelForImageTextToText`` and its processor.

    Give either ``model_name_or_path`` (a hub id or folder; loaded lazily on first use, with the peft
    adapter folder ``adapter`` on top if given) or ready ``model`` and ``processor`` objects (e.g.
    an explainer being trained). Temperature 0 decodes greedily (``n`` equal replies from one
    generation); a positive temperature samples ``n`` sequences. Requests run one at a time (a lock
    guards the model), so a batch gains nothing from ``concurrency``. ``seed`` seeds the sampler.
    """

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        adapter: str | Path | None = None,
        model: Any = None,
        processor: Any = None,
        device: str | None = None,
        dtype: str = "auto",
        name: str | None = None,
        cache: Any = None,
    ) -> None:
        super().__init__(cache=cache, concurrency=1)
        if model_name_or_path is None and (model is None or processor is None):
            raise UserInputError("HFLocalBackend needs model_name_or_path, or both model and processor objects")
        if adapter is not None and not Path(adapter).is_dir():
            raise UserInputError(f"adapter folder {str(adapter)!r} does not exist; expected a peft adapter directory")
        self.model_name_or_path = None if model_name_or_path is None else str(model_name_or_path)
        self.adapter = None if adapter is None else str(adapter)
        self._model, self._processor = model, processor
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = dtype
        default_name = self.model_name_or_path or type(model).__name__
        self.model = name or (default_name + (f"+{Path(self.adapter).name}" if self.adapter else ""))
        self._lock = threading.Lock()

    def cache_params(self) -> dict[str, Any]:
        return {"adapter": self.adapter}

    def load(self) -> tuple[Any, Any]:
        """Load (once) and return ``(model, processor)``."""
        if self._model is None:
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self._processor = AutoProcessor.from_pretrained(self.model_name_or_path)
            dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
            model = AutoModelForImageTextToText.from_pretrained(self.model_name_or_path, dtype=dtype)
            if self.adapter is not None:
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, self.adapter)
            self._model = model.to(self.device).eval()
        return self._model, self._processor

    @torch.inference_mode()
    def _generate(self, messages: list[Message], *, n, temperature, max_tokens, seed) -> list[str]:
        model, processor = self.load()
        local_messages, images = to_local_messages(messages)
        text = processor.apply_chat_template(local_messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=images or None, return_tensors="pt")
        device = next(model.parameters()).device
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        sample = temperature > 0
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "do_sample": sample}
        if sample:
            kwargs.update(temperature=temperature, num_return_sequences=n)
        with self._lock:
            if seed is not None:
                torch.manual_seed(seed)
            output = model.generate(**inputs, **kwargs)
        prompt_length = inputs["input_ids"].shape[1]
        tokenizer = getattr(processor, "tokenizer", processor)
        replies = tokenizer.batch_decode(output[:, prompt_length:], skip_special_tokens=True)
        replies = [r.strip() for r in replies]
        return replies if sample else replies[:1] * n

    def __repr__(self) -> str:
        return f"HFLocalBackend(model={self.model!r}, adapter={self.adapter!r}, device={self.device!r})"
