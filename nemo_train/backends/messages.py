"""Chat messages in the OpenAI format, with images as PIL images, tensors or data URLs.

A message is ``{"role": "system" | "user" | "assistant", "content": str | list[part]}``. A part is
``{"type": "text", "text": str}``, ``{"type": "image_url", "image_url": {"url": str}}`` (the HTTP
form) or our in-memory form ``{"type": "image", "image": PIL.Image | Tensor[3,H,W] in [0,1]}``.
Backends convert the in-memory form themselves: HTTP backends to base64 PNG data URLs, local
backends to PIL images.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import torch
from PIL import Image

from nemo_train.errors import UserInputError

Message = dict[str, Any]

ROLES = ("system", "user", "assistant")
DATA_URL_PREFIX = "data:image/png;base64,"


def text_part(text: str) -> dict[str, Any]:
    """A text content part."""
    return {"type": "text", "text": str(text)}


def image_part(image: Image.Image | torch.Tensor) -> dict[str, Any]:
    """An in-memory image content part (converted by each backend)."""
    return {"type": "image", "image": image}


def user_message(text: str, images: list[Image.Image | torch.Tensor] | tuple = ()) -> Message:
    """A user message: the images first (as most chat templates expect), then the text."""
    return {"role": "user", "content": [image_part(im) for im in images] + [text_part(text)]}


def system_message(text: str) -> Message:
    """A system message."""
    return {"role": "system", "content": str(text)}


def assistant_message(text: str) -> Message:
    """An assistant message (e.g. a previous reply, before a re-ask)."""
    return {"role": "assistant", "content": str(text)}


def to_pil(image: Image.Image | torch.Tensor) -> Image.Image:
    """An RGB PIL image from a PIL image or a float ``[3,H,W]`` / ``[H,W]`` tensor in ``[0, 1]``."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, torch.Tensor):
        t = image.detach().cpu()
        if t.ndim == 2:
            t = t.unsqueeze(0)
        if t.ndim != 3 or t.shape[0] not in (1, 3):
            raise UserInputError(f"image tensor of shape {tuple(t.shape)}; expected [3,H,W] or [1,H,W] in [0, 1]")
        if t.dtype == torch.uint8:
            t = t.float() / 255.0
        t = t.float().clamp(0, 1).expand(3, -1, -1)
        array = (t * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        return Image.fromarray(array, mode="RGB")
    raise UserInputError(f"image of type {type(image).__name__}; expected a PIL image or a [3,H,W] tensor")


def png_bytes(image: Image.Image | torch.Tensor) -> bytes:
    """The image encoded as PNG (lossless, deterministic for equal pixels)."""
    buffer = io.BytesIO()
    to_pil(image).save(buffer, format="PNG")
    return buffer.getvalue()


def to_data_url(image: Image.Image | torch.Tensor) -> str:
    """A ``data:image/png;base64,...`` URL of the image."""
    return DATA_URL_PREFIX + base64.b64encode(png_bytes(image)).decode("ascii")


def from_data_url(url: str) -> Image.Image:
    """Decode a base64 ``data:image/...`` URL into a PIL image."""
    if not url.startswith("data:image/") or ";base64," not in url:
        raise UserInputError(f"image URL {url[:40]!r}...; expected a base64 data:image/... URL")
    try:
        raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except binascii.Error as err:
        raise UserInputError(f"image data URL with bad base64 ({err})") from None
    return Image.open(io.BytesIO(raw)).convert("RGB")


def _check_message(message: Any, index: int) -> None:
    if not isinstance(message, dict) or message.get("role") not in ROLES or "content" not in message:
        raise UserInputError(
            f"message {index} is {str(message)[:60]!r}; expected a dict with role in {ROLES} and content"
        )


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [text_part(content)]
    if isinstance(content, list):
        return content
    raise UserInputError(f"message content of type {type(content).__name__}; expected str or a list of parts")


def to_openai_messages(messages: list[Message]) -> list[Message]:
    """Messages with every in-memory image turned into an ``image_url`` data-URL part (JSON-ready)."""
    out = []
    for i, message in enumerate(messages):
        _check_message(message, i)
        if isinstance(message["content"], str):
            out.append({"role": message["role"], "content": message["content"]})
            continue
        parts = []
        for part in _parts(message["content"]):
            kind = part.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": str(part["text"])})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": to_data_url(part["image"])}})
            elif kind == "image_url":
                url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else part["image_url"]
                parts.append({"type": "image_url", "image_url": {"url": str(url)}})
            else:
                raise UserInputError(f"content part of type {kind!r}; expected 'text', 'image' or 'image_url'")
        out.append({"role": message["role"], "content": parts})
    return out


def to_local_messages(messages: list[Message]) -> tuple[list[Message], list[Image.Image]]:
    """Messages in the Hugging Face chat-template form (``{"type": "image"}`` placeholders) and their images."""
    out, images = [], []
    for i, message in enumerate(messages):
        _check_message(message, i)
        parts = []
        for part in _parts(message["content"]):
            kind = part.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": str(part["text"])})
            elif kind in ("image", "image_url"):
                if kind == "image":
                    image = to_pil(part["image"])
                else:
                    url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else part["image_url"]
                    image = from_data_url(url)
                images.append(image)
                parts.append({"type": "image"})
            else:
                raise UserInputError(f"content part of type {kind!r}; expected 'text', 'image' or 'image_url'")
        out.append({"role": message["role"], "content": parts})
    return out, images
