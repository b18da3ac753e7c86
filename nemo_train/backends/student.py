"""A distilled explainer as a chat backend, so it can sit wherever NEMO asks an MLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from datamodules.explanations import side_by_side
from nemo_train.backends.hf_local import HFLocalBackend
from nemo_train.backends.messages import Message, image_part, to_pil
from nemo_train.errors import UserInputError
from nemo_train.models.vlm import EXPLAINER_META

#: What a saved explainer adapter folder holds (peft's two files and the base model's name).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", EXPLAINER_META)


def check_adapter_folder(path: str | Path, option: str) -> Path:
    """``path`` as a ``Path`` when it is a complete adapter folder (written by ``save_adapter``); otherwise a
    one-line error naming ``option`` and the missing or damaged file. The weights' header is read (not the
    weights), which is enough to find a file cut short."""
    folder = Path(path)
    expected = "expected the adapter folder an explainer's fit writes (<fit root>/adapter)"
    if not folder.is_dir():
        raise UserInputError(f"{option} {str(path)!r} is not a folder; {expected}")
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise UserInputError(f"{option} {str(path)!r} is not an adapter folder (no {', '.join(missing)}); {expected}")
    damaged = "copy the folder again or rerun the fit that writes it"
    for name in ("adapter_config.json", EXPLAINER_META):
        try:
            valid = isinstance(json.loads((folder / name).read_text(encoding="utf-8")), dict)
        except (UnicodeDecodeError, json.JSONDecodeError):
            valid = False
        if not valid:
            raise UserInputError(f"adapter file {str(folder / name)!r} is damaged (not a JSON object); {damaged}")
    weights = folder / "adapter_model.safetensors"
    try:
        with safe_open(str(weights), framework="pt"):
            pass
    except (SafetensorError, OSError) as err:
        reason = " ".join(str(err).split())[:120]
        raise UserInputError(f"adapter weights {str(weights)!r} are damaged ({reason}); {damaged}") from None
    return folder


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
    :class:`~nemo_train.scoring.structured.StructuredEditDeriver` and the distillation prompts.
    """

    def load(self) -> tuple[Any, Any]:
        """As :meth:`HFLocalBackend.load`; a student folder missing a file or holding a damaged one is a one-line
        error naming it (before any weight is read)."""
        if self._model is None and self.model_name_or_path is not None and Path(self.model_name_or_path).is_dir():
            check_adapter_folder(self.model_name_or_path, "student")
        return super().load()

    def _generate_many(self, conversations: list[list[Message]], **kwargs: Any) -> list[list[str]]:
        return super()._generate_many([merge_images(m) for m in conversations], **kwargs)
