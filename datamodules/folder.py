"""Reading image files from a data folder robustly: missing folders fail clearly, corrupt files are skipped.

The one image-folder reader of the toolkit: the folder-backed datasets (real CLEVR renders, NICO++) and the
NEMO benchmark builder (ImageNet-R style ``root/<class>/<image>`` folders) all list files with
:func:`list_images`, decode them with :func:`read_image` and drop unreadable ones with :func:`open_images` /
:func:`load_images` / :func:`readable_paths`. Folder datasets stream: :func:`open_images` checks the files once
and returns :class:`ImageFiles`, which decodes an image only when its item (or a batch) is read, so a 50,000-image
folder never sits in memory; :func:`load_images` decodes everything into one tensor (for small sets). Unreadable or truncated files do not stop a run: they are left out, ONE warning says
how many were skipped (and names the first few), and the count is kept on the result
(:attr:`LoadedImages.num_skipped`) so a datamodule can expose it.

High-bit-depth images are scaled, not clipped: a 16-bit grey image (PIL modes ``I;16*`` and ``I``) is
mapped from 0-65535 to 0-255 before it becomes RGB (``convert("RGB")`` alone would clip every value above
255, leaving a handful of grey levels).
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

from nemo_train.errors import UserInputError
from nemo_train.quiet import progress_bar

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


class ImageFiles:
    """Image files read on demand: a lazy stand-in for a ``uint8[N, 3, S, S]`` tensor.

    ``files[i]`` decodes one image (``uint8[3, S, S]``, the same bits :func:`load_images` gives), ``files[a:b]``
    decodes that batch (``uint8[n, 3, S, S]``), and ``files[index]`` with a tensor, list or boolean mask selects a
    lazy subset. Only paths are held (cheap to pickle into DataLoader workers).
    """

    dtype = torch.uint8

    def __init__(self, paths: Sequence[str | Path], size: int, resize: str = "center_crop") -> None:
        self.paths = [Path(p) for p in paths]
        self.size = size
        self.resize = resize

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.paths), 3, self.size, self.size))

    def decode(self, path: Path) -> torch.Tensor:
        """One file as ``uint8[3, S, S]``; a file that became unreadable after the check is a one-line error."""
        try:
            array = read_image(path, self.size, self.resize)
        except UNREADABLE as err:
            raise UserInputError(f"cannot read image {str(path)!r}: {err}") from None
        return torch.from_numpy(np.array(array, dtype=np.uint8)).permute(2, 0, 1).contiguous()

    def __getitem__(self, index):
        if isinstance(index, tuple):
            return self[index[0]][index[1:]]
        if isinstance(index, slice):
            paths = self.paths[index]
            if not paths:
                return torch.empty(0, 3, self.size, self.size, dtype=torch.uint8)
            return torch.stack([self.decode(p) for p in paths])
        if isinstance(index, (int, np.integer)) or (isinstance(index, torch.Tensor) and index.ndim == 0):
            return self.decode(self.paths[int(index)])
        index = torch.as_tensor(index)
        if index.dtype == torch.bool:
            index = torch.nonzero(index).flatten()
        return ImageFiles([self.paths[int(i)] for i in index.tolist()], self.size, self.resize)

    def materialize(self) -> torch.Tensor:
        """Every image decoded into one ``uint8[N, 3, S, S]`` tensor."""
        return self[:]


def subfolders(folder: Path) -> list[Path]:
    """Folders directly inside ``folder`` (sorted; hidden ones left out)."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def class_roots(root: str | Path) -> list[Path]:
    """The folders holding the class folders: ``[root]`` for ``root/<class>/<image>``, or the group folders of
    ``root/<group>/<class>/<image>`` (ImageNet-D's ``background/``, ``texture/``, ``material/``) when no folder
    directly under ``root`` holds images but folders below them do."""
    root = Path(root)
    subs = subfolders(root)
    if any(list_images(s) for s in subs):
        return [root]
    groups = [s for s in subs if any(list_images(c) for c in subfolders(s))]
    return groups or [root]


def class_folder_names(root: str | Path) -> list[str]:
    """Sorted names of the class folders of ``root`` (across its group folders, see :func:`class_roots`)."""
    return sorted({p.name for r in class_roots(root) for p in subfolders(r)})


@dataclass
class LoadedImages:
    """Images of files: ``images`` (``uint8[N, 3, S, S]``, a tensor or lazy :class:`ImageFiles`), ``kept``
    (indices of the input paths that were read, in order) and ``skipped`` (the paths that could not be read)."""

    images: torch.Tensor | ImageFiles
    kept: torch.Tensor
    skipped: list[Path] = field(default_factory=list)

    @property
    def num_skipped(self) -> int:
        """How many files could not be read."""
        return len(self.skipped)


#: PIL modes of single-channel images with more than 8 bits per pixel (read as 16-bit values).
WIDE_GREY_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N")
#: Errors that mean "this file is not a readable image".
UNREADABLE = (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError, SyntaxError)


def to_rgb(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB; 16-bit grey is scaled from 0-65535 to 0-255 (not clipped at 255)."""
    if img.mode in WIDE_GREY_MODES:
        wide = np.asarray(img, dtype=np.float64).clip(0, 65535)
        img = Image.fromarray(np.rint(wide / 257.0).astype(np.uint8), mode="L")
    return img.convert("RGB")


def read_image(path: str | Path, size: int, resize: str = "center_crop") -> np.ndarray:
    """Decode one file to ``uint8[S, S, 3]`` RGB; raises one of :data:`UNREADABLE` when it is unreadable.

    ``center_crop`` scales the shorter side to ``size`` and cuts the centre square; ``stretch`` scales both
    sides to ``size``.
    """
    with Image.open(path) as img:
        img.draft("RGB", (size, size))  # JPEG: decode at a reduced scale when that is still >= size
        img = to_rgb(img)
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


def _check_options(size: int, resize: str) -> None:
    if size < 1:
        raise UserInputError(f"image size {size} must be a positive number of pixels")
    if resize not in RESIZE_MODES:
        raise UserInputError(f"unknown resize mode {resize!r}; expected one of {list(RESIZE_MODES)}")


def open_images(
    paths: Sequence[str | Path],
    size: int,
    resize: str = "center_crop",
    num_threads: int = 4,
    desc: str = "checking images",
) -> LoadedImages:
    """Like :func:`load_images`, but streaming: every file is checked once (decoded at a reduced scale, then
    dropped) and ``images`` is an :class:`ImageFiles` over the readable ones, decoded when an item is read."""
    _check_options(size, resize)
    paths = [Path(p) for p in paths]
    ok = _decode_all(paths, min(size, 64), "stretch", num_threads, desc, keep=False)
    kept = [i for i, good in enumerate(ok) if good]
    skipped = [p for p, good in zip(paths, ok) if not good]
    _warn_skipped(skipped, len(paths))
    return LoadedImages(
        images=ImageFiles([paths[i] for i in kept], size, resize),
        kept=torch.tensor(kept, dtype=torch.long),
        skipped=skipped,
    )


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
    _check_options(size, resize)
    paths = [Path(p) for p in paths]

    arrays = _decode_all(paths, size, resize, num_threads, desc)
    kept = [i for i, a in enumerate(arrays) if a is not None]
    skipped = [paths[i] for i, a in enumerate(arrays) if a is None]
    _warn_skipped(skipped, len(paths))
    if kept:
        images = torch.from_numpy(np.stack([arrays[i] for i in kept])).permute(0, 3, 1, 2).contiguous()
    else:
        images = torch.empty(0, 3, size, size, dtype=torch.uint8)
    return LoadedImages(images=images, kept=torch.tensor(kept, dtype=torch.long), skipped=skipped)


def readable_paths(
    paths: Sequence[str | Path], size: int = 64, num_threads: int = 4, desc: str = "checking images"
) -> tuple[list[int], list[Path]]:
    """Indices of the ``paths`` that decode (at ``size`` px, so JPEGs decode at a reduced scale) and the paths
    that do not, with the same single warning as :func:`load_images`; nothing is kept in memory."""
    paths = [Path(p) for p in paths]
    ok = _decode_all(paths, size, "stretch", num_threads, desc, keep=False)
    skipped = [p for p, good in zip(paths, ok) if not good]
    _warn_skipped(skipped, len(paths))
    return [i for i, good in enumerate(ok) if good], skipped


def _decode_all(paths: list[Path], size: int, resize: str, num_threads: int, desc: str, keep: bool = True) -> list:
    def decode(path: Path):
        try:
            array = read_image(path, size, resize)
        except UNREADABLE:
            return None if keep else False
        return array if keep else True

    with ThreadPoolExecutor(max_workers=max(1, num_threads)) as pool:
        return list(
            progress_bar(pool.map(decode, paths), total=len(paths), desc=desc, disable=len(paths) < 500, leave=False)
        )


def _warn_skipped(skipped: list[Path], total: int) -> None:
    if skipped:
        examples = ", ".join(str(p) for p in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        warnings.warn(
            f"skipped {len(skipped)} unreadable image file(s) of {total}: {examples}",
            UnreadableImagesWarning,
            stacklevel=3,
        )
