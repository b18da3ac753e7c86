"""A distilled explainer as a chat backend, so it can sit wherever NEMO asks an MLLM."""

from __future__ import annotations

from typing import Any

from datamodules.explanations import side_by_side
from nemo_train.backends.hf_local import HFLocalBackend
from nemo_train.backends.messages import Message, image_part, to_pil
from nemo_train.errors import UserInputError


def merge_images(messages: list[Message]) -> list[Message]:
    """Messages whose several images are shown as one picture, side by side in order (first on the left)."""
    out = []
    for message in messages:
        content = message.get("content")
        images = [p for p in content if p.get("type") == "image"] if isinstance(content, list) else []
        if len(images) < 2:
            out.append(message)
            continue
        picture = to_pil(images[0]["image"])
        for part in images[1:]:
            picture = side_by_side(picture, to_pil(part["image"]))
        rest = [p for p in content if p.get("type") != "image"]
        out.append({**message, "content": [image_part(picture), *rest]})
    return out


class StudentBackend(HFLocalBackend):
    """A distilled explainer (a saved adapter folder, or model + processor objects) answering NEMO's questions.

    It is an :class:`HFLocalBackend` that shows a message's images side by side in one picture, the way the
    explainer was trained on an error beside its reference (ChangeMLLM sends the two as separate images).
    Its answers are structured (``{"cause_of_error": "... Edit: <edit>"}``): pair it with
    :class:`~nemo_train.nemo.structured.StructuredEditDeriver` and the distillation prompts.
    """

    def __init__(self, *args: Any, max_tokens: int | None = None, **kwargs: Any) -> None:
        """``max_tokens`` caps every reply (a structured answer is short; a caller's 512 would let a poorly
        trained student ramble); other arguments as :class:`HFLocalBackend`."""
        super().__init__(*args, **kwargs)
        if max_tokens is not None and max_tokens < 1:
            raise UserInputError(f"max_tokens={max_tokens}; expected an integer >= 1")
        self.max_tokens = max_tokens

    def cache_params(self) -> dict[str, Any]:
        return {**super().cache_params(), "max_tokens_cap": self.max_tokens}

    def _generate_many(self, conversations: list[list[Message]], **kwargs: Any) -> list[list[str]]:
        if self.max_tokens is not None:
            kwargs["max_tokens"] = min(kwargs["max_tokens"], self.max_tokens)
        return super()._generate_many([merge_images(m) for m in conversations], **kwargs)
