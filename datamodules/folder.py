"""Reading image files from a data folder robustly: missing folders fail clearly, corrupt files are skipped.

Every folder-backed dataset of ours (real CLEVR renders, NICO++) goes through :func:`require_folder` and
:func:`load_images`. Unreadable or truncated files do not stop a run: they are left out, ONE warning says
how many were skipped (and names the first few), and the count is kept on the result
(:attr:`LoadedImages.num_skipped`) so a datamodule can expose it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from tqdm.auto import tqdm

from nemo_train.errors import UserInputError

#: File name endings read as images (compared in lower case).
IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")
RESIZE_MODES = ("center_crop", "stretch")


class UnreadableImagesWarning(UserWarning):
    """Some image files of a folder dataset could not be decoded and were skipped."""


def require_folder(path: str | Path, what: str = "data folder") -> Path:
    """``path`` as a :class:`Path`, or :class:`UserInputError` naming it when it is not an existing folder."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise UserInputError(f"{what} {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise UserInputError(f"{what} {str(folder)!r} is not a folder")
    return folder


def list_images(folder: str | Path) -> list[Path]:
    """Image files directly inside ``folder`` (by extension, sorted by name; hidden files left out)."""
    folder = Path(folder)
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS
    )


@dataclass
class LoadedImages:
    """Images decoded from files: ``images`` (``uint8[N, 3, S, S]``), ``kept`` (indices of the input paths
    that were read, in order) and ``skipped`` (the paths that could not be read)."""

    images: torch.Tensor
    kept: torch.Tensor
    skipped: list[Path] = field(default_factory=list)

    @property
    def num_skipped(self) -> int:
        """How many files could not be read."""
        return len(self.skipped)


def read_image(path: str | Path, size: int, resize: str = "center_crop") -> np.ndarray:
    """Decode one file to ``uint8[S, S, 3]`` RGB; raises ``OSError`` / ``ValueError`` when it is unreadable.

    ``center_crop`` scales the shorter side to ``size`` and cuts the centre square; ``stretch`` scales both
    sides to ``size``.
    """
    with Image.open(path) as img:
        img.draft("RGB", (size, size))  # JPEG: decode at a reduced scale when that is still >= size
        img = img.convert("RGB")
        if resize == "center_crop":
            w, h = img.size
            scale = size / min(w, h)
            new_w, new_h = max(size, round(w * scale)), max(size, round(h * scale))
            img = img.resize((new_w, new_h), Image.Resampling.BILINEAR, reducing_gap=2.0)
            left, top = (new_w - size) // 2, (new_h - size) // 2
            img = img.crop((left, top, left + size, top + size))
        else:
            img = img.resize((size, size), Image.Resampling.BILINEAR, reducing_gap=2.0)
        return np.asarray(img, dtype=np.uint8)


def load_images(
    paths: Sequence[str | Path],
    size: int,
    resize: str = "center_crop",
    num_threads: int = 4,
    desc: str = "reading images",
) -> LoadedImages:
    """Decode ``paths`` into one ``uint8`` tensor, skipping unreadable files with a single warning.

    Args:
        paths: image files.
        size: output side length in pixels.
        resize: ``"center_crop"`` or ``"stretch"`` (see :func:`read_image`).
        num_threads: decoding threads (PIL releases the GIL while decoding).
        desc: label of the progress bar.
    """
    if size < 1:
        raise UserInputError(f"image size {size} must be a positive number of pixels")
    if resize not in RESIZE_MODES:
        raise UserInputError(f"unknown resize mode {resize!r}; expected one of {list(RESIZE_MODES)}")
    paths = [Path(p) for p in paths]

    def decode(path: Path) -> np.ndarray | None:
        try:
            return read_image(path, size, resize)
        except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
            return None

    with ThreadPoolExecutor(max_workers=max(1, num_threads)) as pool:
        arrays = list(tqdm(pool.map(decode, paths), total=len(paths), desc=desc, disable=len(paths) < 500, leave=False))
    kept = [i for i, a in enumerate(arrays) if a is not None]
    skipped = [paths[i] for i, a in enumerate(arrays) if a is None]
    if skipped:
        examples = ", ".join(str(p) for p in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        warnings.warn(
            f"skipped {len(skipped)} unreadable image file(s) of {len(paths)}: {examples}",
            UnreadableImagesWarning,
            stacklevel=2,
        )
    if kept:
        images = torch.from_numpy(np.stack([arrays[i] for i in kept])).permute(0, 3, 1, 2).contiguous()
    else:
        images = torch.empty(0, 3, size, size, dtype=torch.uint8)
    return LoadedImages(images=images, kept=torch.tensor(kept, dtype=torch.long), skipped=skipped)
