"""Image-explanation pairs: the record type and its JSONL reader and writer.

JSONL format, one pair per line (paths relative to the JSONL file's folder, or absolute)::

    {"image": "images/000123.png",            # required: the image the classifier failed on
     "counterfactual": "images/000123_cf.png", # optional: a similar image it is confident on
     "explanation": "The image is pixelated.", # required for training: the assistant's answer
     "prompt": "...", "system": "...",         # optional: overrides of the question / the context
     "cause": "pixelation",                    # optional: ground-truth cause (scored by the callback)
     "label": 3, "prediction": 5,              # optional: true class and the classifier's prediction
     "cei": 87.5, "provenance": {...}}         # optional: a teacher's CEI and where the pair came from
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError

_TEXT_KEYS = ("image", "explanation", "counterfactual", "prompt", "system", "cause")
_INT_KEYS = ("label", "prediction")


@dataclass
class ExplanationRecord:
    """One image-explanation pair; ``image`` / ``counterfactual`` are absolute paths once read.

    ``origin`` (``"<file>:<line>"`` for a record read from JSONL) names it in error messages and is not written.
    """

    image: str
    explanation: str | None = None
    counterfactual: str | None = None
    prompt: str | None = None
    system: str | None = None
    cause: str | None = None
    label: int | None = None
    prediction: int | None = None
    cei: float | None = None  # CEI of the explanation (pairs written by a distillation teacher)
    provenance: dict[str, Any] | None = None  # who wrote the explanation, from which error and view
    origin: str | None = field(default=None, compare=False, repr=False)

    def to_json(self, root: Path | None = None) -> dict[str, Any]:
        """The JSONL object, with image paths relative to ``root`` when given; ``None`` fields omitted."""
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "origin"}
        if root is not None:
            for key in ("image", "counterfactual"):
                if key in out:
                    out[key] = str(Path(out[key]).relative_to(root))
        return out


#: The keys a JSONL line may hold.
RECORD_KEYS = frozenset(f.name for f in fields(ExplanationRecord)) - {"origin"}


def _check_types(obj: dict[str, Any], where: str) -> None:
    if not isinstance(obj.get("image"), str):
        raise UserInputError(f'{where} has no \'image\' path string; expected an object like {{"image": "a.png", ...}}')
    unknown = set(obj) - RECORD_KEYS
    if unknown:
        raise UserInputError(f"{where} has unknown key(s) {sorted(unknown)}; known keys: {sorted(RECORD_KEYS)}")
    for key in _TEXT_KEYS:
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            raise UserInputError(f"{where}: {key!r} is {type(value).__name__} {value!r}; expected a string")
    for key in _INT_KEYS:
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserInputError(f"{where}: {key!r} is {type(value).__name__} {value!r}; expected an integer")
    cei, provenance = obj.get("cei"), obj.get("provenance")
    if cei is not None and (isinstance(cei, bool) or not isinstance(cei, (int, float))):
        raise UserInputError(f"{where}: 'cei' is {type(cei).__name__} {cei!r}; expected a number")
    if provenance is not None and not isinstance(provenance, dict):
        raise UserInputError(f"{where}: 'provenance' is {type(provenance).__name__}; expected an object")


def read_records(path: str | Path) -> list[ExplanationRecord]:
    """Read a JSONL of pairs; image paths are resolved against the file's folder.

    Raises :class:`UserInputError` naming the file and line for a missing file, bytes that are not UTF-8,
    a line that is not a JSON object, a field of the wrong type or an unknown key. Missing images and empty
    explanations are left to the encoder, which skips and counts them.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"pairs file {str(path)!r} does not exist; expected a JSONL of image-explanation pairs")
    records = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserInputError(f"{where} is not UTF-8 text (byte {err.start}); expected UTF-8 JSONL") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserInputError(f"{where} is not valid JSON ({err.msg}); expected one JSON object per line") from None
        if not isinstance(obj, dict):
            raise UserInputError(f'{where} is a JSON {type(obj).__name__}; expected an object like {{"image": ...}}')
        _check_types(obj, where)
        for key in ("image", "counterfactual"):
            if obj.get(key) is not None:
                obj[key] = str((path.parent / obj[key]).resolve())
        records.append(ExplanationRecord(**obj, origin=where))
    return records


def write_records(records: Iterable[ExplanationRecord], path: str | Path) -> Path:
    """Write pairs as JSONL, image paths relative to the file's folder (they must lie under it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = path.parent.resolve()
    lines = [json.dumps(r.to_json(root)) for r in records]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path
