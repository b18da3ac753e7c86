"""Class-mapping facts shipped with the toolkit: which ImageNet-1k classes each class folder of a benchmark stands for.

The JSON files next to this module are data (sources and licences in ``README.md``):

* ``objectnet_to_imagenet_1k.json``: the 113 ObjectNet classes that overlap ImageNet-1k, each with its folder,
  its ObjectNet name and the ImageNet-1k classes (indices in WordNet-id order, and names) it stands for;
* ``objectnet_folders.json``: all 313 ObjectNet class folders and their names;
* ``imagenet_d_to_imagenet_1k.json``: the 113 class folders of ImageNet-D, same fields.

:func:`read_mapping` reads these files and the plain form ``{"class name": [imagenet ids]}`` a user may write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nemo_train.errors import UserInputError

MAPPINGS_DIR = Path(__file__).resolve().parent
#: The benchmarks whose class folders need a shipped mapping onto ImageNet-1k, and its file.
SHIPPED: dict[str, str] = {
    "objectnet": "objectnet_to_imagenet_1k.json",
    "imagenet_d": "imagenet_d_to_imagenet_1k.json",
}
NUM_IMAGENET_CLASSES = 1000


@dataclass(frozen=True)
class MappedClass:
    """One benchmark class: its folder, its name and the ImageNet-1k indices that count as it."""

    folder: str
    name: str
    imagenet_ids: tuple[int, ...]


def shipped_mapping(benchmark: str) -> Path | None:
    """The shipped mapping file of ``benchmark`` (``objectnet``, ``imagenet_d``), ``None`` for others."""
    name = SHIPPED.get(benchmark)
    return MAPPINGS_DIR / name if name is not None else None


def read_mapping(path: str | Path, num_source_classes: int = NUM_IMAGENET_CLASSES) -> list[MappedClass]:
    """The classes of a mapping file, in file order.

    Two forms are read: ``{"classes": [{"folder", "name", "imagenet_ids"}, ...]}`` (the shipped files) and
    ``{"class name": [ids] or id, ...}`` (the folder is the class name). Every id must lie in
    ``0 .. num_source_classes - 1`` and every class needs at least one.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserInputError(f"class mapping file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"class mapping file {str(path)!r} is not valid UTF-8 JSON: {err}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"class mapping file {str(path)!r} must hold a JSON object name -> list of ImageNet ids")
    if isinstance(data.get("classes"), list):
        rows = data["classes"]
        if not all(isinstance(r, dict) and "folder" in r and "imagenet_ids" in r for r in rows):
            raise UserInputError(f"every entry of 'classes' in {str(path)!r} needs 'folder' and 'imagenet_ids'")
        raw = [(str(r["folder"]), str(r.get("name", r["folder"])), r["imagenet_ids"]) for r in rows]
    else:
        raw = [(str(name), str(name), ids) for name, ids in data.items()]
    classes = []
    for folder, name, ids in raw:
        ids = [ids] if isinstance(ids, int) else ids
        if not isinstance(ids, list) or not ids:
            raise UserInputError(f"class {name!r} of {str(path)!r} maps to no ImageNet id; expected a list of ids")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_source_classes:
                raise UserInputError(
                    f"class {name!r} of {str(path)!r} maps to id {i!r}; expected 0-{num_source_classes - 1}"
                )
        classes.append(MappedClass(folder, name, tuple(ids)))
    folders = [c.folder for c in classes]
    if len(set(folders)) != len(folders):
        raise UserInputError(f"class mapping file {str(path)!r} names a class folder twice")
    return classes


def objectnet_folders() -> dict[str, str]:
    """All 313 ObjectNet class folders -> class names (the shipped ``objectnet_folders.json``)."""
    return dict(json.loads((MAPPINGS_DIR / "objectnet_folders.json").read_text(encoding="utf-8"))["folders"])
