"""The images of an evaluated error, kept as PNG files beside the run's records (for the run's report page).

Each scored record names, relative to the run folder, the error image (``images/<target>/<sample>.png``, one
file per target and error, shared by the methods) and the image its explanation's edit produced
(``images/<target>/<method>/<sample>.png``; none for a prompt intervention, which edits no image), and the
names of its true and predicted classes. Files are written through a scratch file and a rename, so a killed
run leaves whole files, and several processes may write the same error image.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from datamodules.explanations.images import to_pil

#: The folder (under the run folder) the images are written to.
IMAGES_DIR = "images"


def safe_name(name: str) -> str:
    """``name`` as one file-name part: characters other than letters, digits, ``.``, ``_``, ``-`` replaced, and a
    short digest of the original added when anything was replaced (so two names never share a file)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "_"
    if cleaned == name:
        return name
    return f"{cleaned[:80]}-{hashlib.sha1(name.encode('utf-8')).hexdigest()[:8]}"


def write_png(path: Path, image: torch.Tensor) -> None:
    """``image`` (``float[3, H, W]`` in [0, 1]) as a PNG at ``path``, through a scratch file of this process."""
    buffer = io.BytesIO()
    to_pil(image).save(buffer, format="PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(buffer.getvalue())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def save_record_images(
    run_dir: str | Path,
    record: dict[str, Any],
    image: torch.Tensor,
    edited: torch.Tensor | None,
    class_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Write the error ``image`` (unless already there) and the ``edited`` one under ``run_dir``; returns the fields
    to add to ``record``: ``image_file``, ``edited_image_file`` (``None`` without an edited image), ``label_name``
    and ``prediction_name`` (``None`` without class names)."""
    folder = Path(IMAGES_DIR) / safe_name(str(record["target"]))
    sample = f"{safe_name(str(record['sample_id']))}.png"
    original = folder / sample
    if not (Path(run_dir) / original).is_file():
        write_png(Path(run_dir) / original, image)
    edited_file = None
    if edited is not None:
        edited_file = folder / safe_name(str(record["method"])) / sample
        write_png(Path(run_dir) / edited_file, edited)

    def name(index: int) -> str | None:
        return str(class_names[index]) if class_names is not None and 0 <= index < len(class_names) else None

    return {
        "image_file": original.as_posix(),
        "edited_image_file": edited_file.as_posix() if edited_file is not None else None,
        "label_name": name(int(record["label"])),
        "prediction_name": name(int(record["prediction"])),
    }
