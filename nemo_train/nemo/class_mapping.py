"""Map ImageNet-1k outputs onto a benchmark's classes (ImageNet-R, ObjectNet, ImageNet-D)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from timm.data import ImageNetInfo

from nemo_train.errors import UserInputError


class ClassMapping:
    """Map ImageNet-1k outputs onto a benchmark's classes (each class = a set of ImageNet ids).

    Args:
        class_names: benchmark class names, in order.
        ids: for each class, the ImageNet indices that count as that class.
        num_source_classes: size of the source output (1000 for ImageNet).
    """

    def __init__(
        self,
        class_names: Sequence[str],
        ids: Sequence[Sequence[int]],
        num_source_classes: int = 1000,
        folders: Sequence[str] | None = None,
    ) -> None:
        if len(class_names) != len(ids):
            raise UserInputError(f"class mapping has {len(class_names)} names but {len(ids)} id sets")
        member = torch.zeros(len(class_names), num_source_classes)
        for k, (name, group) in enumerate(zip(class_names, ids)):
            if not group:
                raise UserInputError(f"class {name!r} maps to no ImageNet id; expected at least one id")
            for i in group:
                if not 0 <= int(i) < num_source_classes:
                    raise UserInputError(f"class {name!r} maps to id {i}; expected 0-{num_source_classes - 1}")
                member[k, int(i)] = 1.0
        self.class_names = list(class_names)
        #: the dataset folder of each class (the class name unless the folders are e.g. WordNet ids)
        self.folders = list(folders) if folders is not None else list(class_names)
        self.ids = [sorted(int(i) for i in group) for group in ids]
        self.member = member  # float[K, S]
        self.owner = torch.full((num_source_classes,), -1, dtype=torch.long)  # source id -> class (last wins)
        for k, group in enumerate(self.ids):
            self.owner[group] = k

    @property
    def mask(self) -> torch.Tensor:
        """``bool[S]``: source ids that belong to some class."""
        return self.member.sum(0) > 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Class probabilities ``[B, K]`` from source logits ``[B, S]`` (softmax over the mapped ids)."""
        masked = logits.masked_fill(~self.mask.to(logits.device), float("-inf"))
        return masked.softmax(-1) @ self.member.to(logits).T

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Class of the top-1 mapped source id ``[B]``."""
        masked = logits.masked_fill(~self.mask.to(logits.device), float("-inf"))
        return self.owner.to(logits.device)[masked.argmax(-1)]

    @classmethod
    def from_json(cls, path: str | Path, num_source_classes: int = 1000) -> ClassMapping:
        """Read ``{"class name": [imagenet ids...], ...}`` (ObjectNet / ImageNet-D mapping files in this form)."""
        path = Path(path)
        if not path.is_file():
            raise UserInputError(f"class mapping file {str(path)!r} does not exist")
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise UserInputError(
                f"class mapping file {str(path)!r} must hold a JSON object name -> list of ImageNet ids"
            )
        ids = [[v] if isinstance(v, int) else list(v) for v in data.values()]
        return cls(list(data), ids, num_source_classes)

    @classmethod
    def from_wnids(cls, wnids: Sequence[str]) -> ClassMapping:
        """One ImageNet id per WordNet id (ImageNet-R's 200 folders ``n01443537`` ...), named by timm's labels."""
        info = ImageNetInfo()
        order = {w: i for i, w in enumerate(info.label_names())}
        unknown = [w for w in wnids if w not in order]
        if unknown:
            raise UserInputError(
                f"unknown ImageNet WordNet id(s) {unknown[:5]}; expected folder names like 'n01443537'"
            )
        names = [info.index_to_description(order[w]).split(",")[0] for w in wnids]
        return cls(names, [[order[w]] for w in wnids], folders=wnids)

    @classmethod
    def for_folder(cls, root: str | Path, mapping_file: str | Path | None = None) -> ClassMapping:
        """The mapping of an ImageNet target onto an image folder ``root/<class>/``: the JSON ``mapping_file``,
        or (without one) the class folders read as WordNet ids."""
        if mapping_file is not None:
            return cls.from_json(mapping_file)
        return cls.from_wnids(sorted(p.name for p in Path(root).iterdir() if p.is_dir()))
