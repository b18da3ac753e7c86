"""Chat conversations for the explainer: messages, the question asked, encoding with labels, batching.

When a counterfactual is used, the two images are shown side by side in one picture, the original on the
left, so any model that takes one image per turn can read it.

:class:`ConversationEncoder` renders each pair with the model's own processor and chat template, and
labels exactly the assistant's answer and its end-of-turn token (everything else is ``-100``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from datamodules.explanations.images import side_by_side, to_pil
from datamodules.explanations.records import ExplanationRecord
from nemo_train.errors import UserInputError
from nemo_train.vocabulary import PAIR_PROMPT, SINGLE_IMAGE_PROMPT

#: Batch keys aligned with the token sequence (padded along dim 1); every other tensor is concatenated.
TOKEN_KEYS = ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "token_type_ids", "cross_attention_mask")
IGNORE_INDEX = -100


def build_messages(prompt: str, system: str | None = None, explanation: str | None = None) -> list[dict]:
    """Chat messages in the processor format: optional system turn, user turn (image then text), answer."""
    messages = []
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]})
    if explanation is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": explanation}]})
    return messages


def question_for(
    record: ExplanationRecord, use_counterfactual: bool, prompt: str | None = None, trained_prompt: str | None = None
) -> str:
    """The question asked about ``record``: ``prompt`` (an override), else the record's own, else the one
    the explainer was trained with, else the pair question (with a counterfactual) or the single-image one."""
    with_cf = use_counterfactual and record.counterfactual is not None
    return prompt or record.prompt or trained_prompt or (PAIR_PROMPT if with_cf else SINGLE_IMAGE_PROMPT)


def record_image(record: ExplanationRecord, use_counterfactual: bool) -> Image.Image:
    """The picture shown to the model: the image, or image | counterfactual side by side."""
    image = to_pil(record.image)
    if use_counterfactual and record.counterfactual:
        image = side_by_side(image, to_pil(record.counterfactual))
    return image


def processor_images(pictures: Sequence[Image.Image]) -> list[list[Image.Image]]:
    """One image list per prompt (what every multimodal processor accepts; Mllama's requires it)."""
    return [[picture] for picture in pictures]


class ConversationTooLong(ValueError):
    """A conversation has more tokens than the limit (it is dropped, never truncated)."""


class ConversationEncoder:
    """Turns (image, prompt, answer) into model inputs with labels on the answer tokens only.

    The prompt is rendered with the processor's chat template and ``add_generation_prompt=True``; the
    full conversation must extend it (true of the Qwen2-VL, Qwen2.5-VL, Llama-3.2-Vision and Idefics3
    templates). Labels keep the answer and the first end-of-turn token after it (``end_token``, default
    the tokenizer's EOS), so the model learns to stop; everything else is ``-100``.
    """

    def __init__(self, processor: Any, max_length: int = 512, end_token: str | None = None) -> None:
        if max_length < 8:
            raise UserInputError(f"max_length={max_length} is too small; expected at least 8 tokens")
        self.processor, self.max_length = processor, max_length
        tokenizer = processor.tokenizer
        self.end_token = end_token or tokenizer.eos_token
        self.end_id = tokenizer.convert_tokens_to_ids(self.end_token)
        if self.end_id is None or self.end_id == tokenizer.unk_token_id:
            raise UserInputError(f"end_token={self.end_token!r} is not a token of this tokenizer")

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.processor.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)

    def _call_processor(self, text: str, image: Image.Image) -> dict[str, torch.Tensor]:
        bos = self.processor.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))  # the template already wrote the BOS
        return dict(
            self.processor(
                text=[text], images=processor_images([image]), return_tensors="pt", add_special_tokens=add_special
            )
        )

    def prompt_inputs(self, image: Image.Image, prompt: str, system: str | None = None) -> dict[str, torch.Tensor]:
        """Inputs for generation (batch of one): the conversation up to the assistant header."""
        return self._call_processor(self._render(build_messages(prompt, system), True), image)

    def encode(
        self, image: Image.Image, prompt: str, explanation: str, system: str | None = None
    ) -> dict[str, torch.Tensor]:
        """Inputs with ``labels`` (batch of one). Raises :class:`ConversationTooLong` past ``max_length``."""
        prompt_text = self._render(build_messages(prompt, system), True)
        full_text = self._render(build_messages(prompt, system, explanation), False)
        if not full_text.startswith(prompt_text):
            raise UserInputError(
                "the processor's chat template does not extend the generation prompt with the answer; cannot mask labels"
            )
        inputs = self._call_processor(full_text, image)
        ids = inputs["input_ids"][0]
        if len(ids) > self.max_length:
            raise ConversationTooLong(f"{len(ids)} tokens > max_length={self.max_length}")
        answer_ids = self.processor.tokenizer(full_text[len(prompt_text) :], add_special_tokens=False)["input_ids"]
        start = len(ids) - len(answer_ids)
        if ids[start:].tolist() != list(answer_ids):  # tokens merged across the boundary: tokenize the prompt
            start = self._call_processor(prompt_text, image)["input_ids"].shape[1]
        labels = torch.full_like(ids, IGNORE_INDEX)
        ends = (ids[start:] == self.end_id).nonzero().flatten()
        stop = start + int(ends[0]) + 1 if len(ends) else len(ids)
        labels[start:stop] = ids[start:stop]
        inputs["labels"] = labels[None]
        return inputs


def collate_encoded(samples: Sequence[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad token-aligned tensors to the longest sample and concatenate the rest along dim 0."""
    length = max(s["input_ids"].shape[1] for s in samples)
    batch: dict[str, torch.Tensor] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if key in TOKEN_KEYS:
            fill = pad_token_id if key == "input_ids" else IGNORE_INDEX if key == "labels" else 0
            padded = []
            for v in values:
                pad = torch.full((v.shape[0], length - v.shape[1], *v.shape[2:]), fill, dtype=v.dtype)
                padded.append(torch.cat([v, pad], dim=1))
            batch[key] = torch.cat(padded)
        else:
            batch[key] = torch.cat(values)
    return batch


class ExplanationCollator:
    """DataLoader ``collate_fn`` for encoded pairs (picklable, for worker processes and DDP spawn)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return collate_encoded(samples, self.pad_token_id)
