"""A backend running a local Hugging Face image-text-to-text model (optionally with a LoRA adapter)."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from typing_extensions import Unpack  # typing.Unpack needs Python 3.11

from nemo_train.backends.base import ChatBackend, Sampling, with_defaults
from nemo_train.backends.cache import cache_key
from nemo_train.backends.messages import Message, to_local_messages, to_openai_messages
from nemo_train.errors import UserInputError
from nemo_train.models.vlm import attach_adapter, is_explainer_folder, load_processor, load_vlm, read_explainer_meta


def conversation_seed(messages: list[Message], seed: int | None) -> int | None:
    """The sampling seed of one conversation: ``seed`` mixed with the conversation's content (its images
    hashed), so that the same request samples the same replies in whatever batch or order it is asked."""
    if seed is None:
        return None
    return int(cache_key("sampling-seed", to_openai_messages(messages), {"seed": seed})[:15], 16)


class HFLocalBackend(ChatBackend):
    """Chat with a local ``AutoModelForImageTextToText`` and its processor.

    Give either ``model_name_or_path`` (a hub id or folder; loaded lazily on first use, with the peft
    adapter folder ``adapter`` on top if given) or ready ``model`` and ``processor`` objects (e.g. an
    explainer being trained). The embedded tiny model id works, and a saved explainer folder (as
    ``model_name_or_path`` or ``adapter``) loads its base model with the adapter on top.

    Temperature 0 decodes greedily (``n`` equal replies from one generation); a positive temperature
    samples ``n`` sequences, seeded by ``seed`` without touching the global RNG. :meth:`chat_batch`
    (and so ``chat_json_batch``) generates up to ``batch_size`` conversations per ``generate`` call
    (left padding, KV cache); a lock lets one generation run at a time. ``name`` (default: the path,
    plus the adapter's folder name) is part of every cache key: give one when passing objects, to reuse
    a cache across runs.

    ``max_new_tokens`` caps the length of every reply, whatever a request asks for (part of the cache key):
    in a batch, one reply that never ends holds every other one for its length.

    Serving a LoRA adapter loaded from a folder, ``merge_adapter`` folds its weights into the base model
    (peft's ``merge_and_unload``), so a forward pass costs what the base model's does; the replies equal the
    unmerged model's up to float rounding. Turn it off to keep the adapter layers separate.
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
        batch_size: int = 16,
        merge_adapter: bool = True,
        max_new_tokens: int | None = None,
        cache: Any = None,
    ) -> None:
        super().__init__(cache=cache, concurrency=1)
        if batch_size < 1:
            raise UserInputError(f"batch_size={batch_size}; expected an integer >= 1")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise UserInputError(f"max_new_tokens={max_new_tokens}; expected an integer >= 1")
        self.batch_size, self.merge_adapter, self.max_new_tokens = batch_size, merge_adapter, max_new_tokens
        if model_name_or_path is None and (model is None or processor is None):
            raise UserInputError("HFLocalBackend needs model_name_or_path, or both model and processor objects")
        if adapter is not None and not Path(adapter).is_dir():
            raise UserInputError(f"adapter folder {str(adapter)!r} does not exist; expected a peft adapter directory")
        self.model_name_or_path = None if model_name_or_path is None else str(model_name_or_path)
        self.adapter = None if adapter is None else str(adapter)
        self._model, self._processor = model, processor
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = dtype
        # an object has no stable name: without ``name`` its cache entries are private to this object
        default_name = self.model_name_or_path or f"{type(model).__name__}@{id(model):x}"
        self.model = name or (default_name + (f"+{Path(self.adapter).name}" if self.adapter else ""))
        self._lock = threading.Lock()

    def cache_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"adapter": self.adapter}
        if self.max_new_tokens is not None:
            params["max_new_tokens"] = self.max_new_tokens
        return params

    def load(self) -> tuple[Any, Any]:
        """Load (once) and return ``(model, processor)``."""
        if self._model is None:
            name, adapter = self.model_name_or_path, self.adapter
            explainer_folder = next((p for p in (adapter, name) if p is not None and is_explainer_folder(p)), None)
            if explainer_folder is not None:  # the adapter folder names its base model and holds the processor
                name = read_explainer_meta(explainer_folder)["model_name_or_path"]
                adapter = explainer_folder
            self._processor = load_processor(adapter if explainer_folder else name)
            model = load_vlm(name, dtype=self.dtype if self.dtype == "auto" else getattr(torch, self.dtype))
            if adapter is not None:
                model = attach_adapter(model, adapter, trainable=False)
                if self.merge_adapter:  # serving only: one weight matrix per layer instead of base + A @ B
                    model = model.merge_and_unload()
            self._model = model.to(self.device).eval()
        return self._model, self._processor

    def _generate(self, messages: list[Message], *, n, temperature, max_tokens, seed) -> list[str]:
        seed = conversation_seed(messages, seed) if temperature > 0 else seed
        return self._generate_many([messages], n=n, temperature=temperature, max_tokens=max_tokens, seed=seed)[0]

    def chat_batch(self, conversations: list[list[Message]], **sampling: Unpack[Sampling]) -> list[list[str]]:
        """Replies to each conversation; those not in the cache are generated ``batch_size`` at a time
        in one left-padded ``generate`` call (greedy replies equal :meth:`chat`'s). Seeded sampled requests
        are generated one conversation per call, each with its own seed drawn from the request seed and the
        conversation, so its samples equal :meth:`chat`'s and do not depend on which other conversations were
        pending (a rerun after a kill samples the rest as an uninterrupted run would)."""
        settings = with_defaults(sampling)
        n = settings["n"]
        keys = [self._cache_key(messages, **settings) for messages in conversations]
        results: list[list[str] | None] = [self._cached(key, n) for key in keys]
        missing = [i for i, r in enumerate(results) if r is None]
        alone = settings["temperature"] > 0 and settings["seed"] is not None
        step = 1 if alone else self.batch_size
        for start in range(0, len(missing), step):
            chunk = missing[start : start + step]
            self.stats.add("requests", len(chunk))
            if alone:
                replies = [self._generate(conversations[chunk[0]], **settings)]
            else:
                replies = self._generate_many([conversations[i] for i in chunk], **settings)
            for i, reply in zip(chunk, replies):
                results[i] = self._store(keys[i], reply, n)
        return results

    @torch.inference_mode()
    def _generate_many(
        self, conversations: list[list[Message]], *, n, temperature, max_tokens, seed
    ) -> list[list[str]]:
        model, processor = self.load()
        tokenizer = getattr(processor, "tokenizer", processor)
        texts, images = [], []
        for messages in conversations:
            local_messages, conversation_images = to_local_messages(messages)
            texts.append(processor.apply_chat_template(local_messages, add_generation_prompt=True, tokenize=False))
            images.append(conversation_images)
        bos = getattr(tokenizer, "bos_token", None)
        inputs = processor(
            text=texts,
            images=images if any(images) else None,  # one image list per conversation (Mllama requires it)
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=not (bos and texts[0].startswith(bos)),
        )
        device = next(model.parameters()).device
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        sample = temperature > 0
        cap = max_tokens if self.max_new_tokens is None else min(max_tokens, self.max_new_tokens)
        kwargs: dict[str, Any] = {"max_new_tokens": cap, "do_sample": sample}
        if getattr(tokenizer, "pad_token_id", None) is not None:
            kwargs["pad_token_id"] = tokenizer.pad_token_id
        if sample:
            kwargs.update(temperature=temperature, num_return_sequences=n)
        rng = nullcontext() if seed is None else torch.random.fork_rng(devices=[] if device.type == "cpu" else [device])
        with self._lock, rng:
            if seed is not None:
                torch.manual_seed(seed)
            output = model.generate(**inputs, **kwargs)
        decoded = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        decoded = [d.strip() for d in decoded]
        if not sample:
            return [[reply] * n for reply in decoded]
        return [decoded[i : i + n] for i in range(0, len(decoded), n)]

    def __repr__(self) -> str:
        return f"HFLocalBackend(model={self.model!r}, adapter={self.adapter!r}, device={self.device!r})"
