"""Map ImageNet-1k outputs onto a benchmark's classes (ImageNet-R, ObjectNet, ImageNet-D).

ObjectNet and ImageNet-D use the mapping files shipped in :mod:`datamodules.mappings` unless a file is given;
ImageNet-R's class folders are WordNet ids and map through timm's ImageNet index.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from timm.data import ImageNetInfo

from datamodules.folder import class_folder_names
from datamodules.mappings import SHIPPED, read_mapping, shipped_mapping
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
        """Read a mapping file: ``{"class name": [imagenet ids...], ...}`` or the shipped form
        ``{"classes": [{"folder", "name", "imagenet_ids"}, ...]}`` (:func:`datamodules.mappings.read_mapping`)."""
        classes = read_mapping(path, num_source_classes)
        return cls(
            [c.name for c in classes],
            [list(c.imagenet_ids) for c in classes],
            num_source_classes,
            folders=[c.folder for c in classes],
        )

    @classmethod
    def shipped(cls, benchmark: str) -> ClassMapping:
        """The shipped mapping of ``objectnet`` or ``imagenet_d``."""
        path = shipped_mapping(benchmark)
        if path is None:
            raise UserInputError(f"no shipped class mapping for {benchmark!r}; expected one of {sorted(SHIPPED)}")
        return cls.from_json(path)

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
        """The mapping of an ImageNet target onto an image folder ``root/<class>/`` (or ImageNet-D's
        ``root/<nuisance>/<class>/``): the JSON ``mapping_file``; else the class folders read as WordNet ids when
        they are; else the shipped mapping (ObjectNet, ImageNet-D) whose classes all have a folder there."""
        if mapping_file is not None:
            return cls.from_json(mapping_file)
        folders = class_folder_names(root)
        wnids = set(ImageNetInfo().label_names())
        if folders and all(f in wnids for f in folders):
            return cls.from_wnids(folders)
        for name in SHIPPED:
            mapping = cls.shipped(name)
            if set(mapping.folders) <= set(folders):
                return mapping
        return cls.from_wnids(folders)  # names the folders that are not WordNet ids

    @classmethod
    def for_benchmark(cls, name: str, root: str | Path, mapping_file: str | Path | None = None) -> ClassMapping:
        """The mapping of a folder benchmark: ``mapping_file`` when given, else the shipped one of ObjectNet /
        ImageNet-D, else (ImageNet-R) the WordNet-id class folders of ``root``."""
        if mapping_file is not None:
            return cls.from_json(mapping_file)
        if shipped_mapping(name) is not None:
            return cls.shipped(name)
        return cls.for_folder(root)
