"""The classifiers of a ``nemo-train zoo`` folder as classifier specs, with the gap spec each was trained with.

``nemo-train zoo`` writes every member as the folder an ordinary ``fit`` of it leaves,
``<zoo>/<train|heldout>/<name>/`` (``checkpoints/best.ckpt`` and a ``provenance.json`` whose
``settings.data.init_args.gaps`` is the member's gap spec), and lists them in ``<zoo>/zoo.json``. A distillation
command given ``zoo`` and a side (``train``: the training zoo, ``heldout``: the zoo whose gap assignments never
occur in training) takes each member of that side as a :class:`~nemo_train.models.specs.FitCheckpoint` named after
the member, and its gaps as the member's bias (which errors are mined and which references are training-like).
Paths are taken relative to the zoo folder, so a moved zoo still reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nemo_train.errors import UserInputError
from nemo_train.models.specs import FitCheckpoint

#: Which side of a zoo: the training zoo or the held-out zoo.
ZooSide = Literal["train", "heldout"]

#: The checkpoint of a member inside its folder (as ``fit`` and ``nemo-train zoo`` name it).
CHECKPOINT = "checkpoints/best.ckpt"


@dataclass(frozen=True)
class ZooClassifier:
    """One member of a zoo: its checkpoint as a classifier spec, its side and its gap spec."""

    spec: FitCheckpoint
    split: str
    gaps: dict[str, list[int]]

    @property
    def name(self) -> str:
        return self.spec.label


def _manifest(zoo: str | Path) -> tuple[Path, dict[str, Any]]:
    path = Path(zoo)
    folder = path.parent if path.name == "zoo.json" else path
    manifest = folder / "zoo.json"
    if not manifest.is_file():
        raise UserInputError(
            f"no zoo at {str(zoo)!r} (no zoo.json); train one with nemo-train zoo --config configs/zoo/shifts_small.yaml"
        )
    try:
        return folder, json.loads(manifest.read_text())
    except (OSError, ValueError) as err:
        raise UserInputError(f"{manifest} is not a readable zoo manifest: {err}") from None


def _gaps(folder: Path, record: dict[str, Any]) -> dict[str, list[int]]:
    """The member's gap spec from its ``provenance.json`` (as a ``fit`` records it), else from ``zoo.json``."""
    provenance = folder / "provenance.json"
    if provenance.is_file():
        settings = json.loads(provenance.read_text()).get("settings") or {}
        gaps = ((settings.get("data") or {}).get("init_args") or {}).get("gaps")
        if isinstance(gaps, dict):
            return {str(k): [int(d) for d in v] for k, v in gaps.items()}
    if isinstance(record.get("gaps"), dict):
        return {str(k): [int(d) for d in v] for k, v in record["gaps"].items()}
    raise UserInputError(f"zoo member {record.get('name')!r} records no gap spec (provenance.json or zoo.json)")


def zoo_members(zoo: str | Path, split: ZooSide) -> list[ZooClassifier]:
    """The members of one side of the zoo at ``zoo`` (its folder or its ``zoo.json``), in zoo order; each
    checkpoint is checked to exist (a one-line error otherwise)."""
    if split not in ("train", "heldout"):
        raise UserInputError(f"zoo side {split!r}; expected 'train' or 'heldout'")
    folder, manifest = _manifest(zoo)
    found = []
    for record in manifest.get("members") or []:
        if record.get("split") != split:
            continue
        member = folder / split / str(record["name"])
        spec = FitCheckpoint(str(member / CHECKPOINT), name=str(record["name"]))
        spec.check()
        found.append(ZooClassifier(spec, split, _gaps(member, record)))
    if not found:
        raise UserInputError(f"the zoo at {str(folder)!r} has no {split} member")
    return found
