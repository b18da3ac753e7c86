"""A distilled explainer as a chat backend, so it can sit wherever NEMO asks an MLLM."""

from __future__ import annotations

from typing import Any

from datamodules.explanations import side_by_side
from nemo_train.backends.hf_local import HFLocalBackend
from nemo_train.backends.messages import Message, image_part, to_pil


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

    def _generate_many(self, conversations: list[list[Message]], **kwargs: Any) -> list[list[str]]:
        return super()._generate_many([merge_images(m) for m in conversations], **kwargs)
