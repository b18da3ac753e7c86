"""Images for the explainer: loading as RGB with a pixel limit, and the side-by-side pair picture."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from PIL import Image

from datamodules.folder import to_rgb
from nemo_train.errors import UserInputError

#: Largest image (width x height) read from a file; larger ones are refused before decoding
#: (a small file can decode to gigabytes).
MAX_IMAGE_PIXELS = 64_000_000

ImageLike = torch.Tensor | Image.Image | str | Path


def open_rgb(path: str | Path) -> Image.Image:
    """The image file at ``path`` as 8-bit RGB (16-bit grey scaled, the shared reader's
    :func:`datamodules.folder.to_rgb`); :class:`UserInputError` when it is over :data:`MAX_IMAGE_PIXELS`.

    Unreadable files raise PIL's ``UnidentifiedImageError`` / ``OSError`` (callers skip or report them).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise UserInputError(
                        f"image {str(path)!r} is {img.width}x{img.height} pixels; expected at most "
                        f"{MAX_IMAGE_PIXELS:,} pixels (refused before decoding)"
                    )
                return to_rgb(img)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
            raise UserInputError(f"image {str(path)!r} is too large to decode ({err})") from None


def to_pil(image: ImageLike) -> Image.Image:
    """An RGB PIL image from a ``float[3, H, W]`` tensor in ``[0, 1]``, a PIL image or a file path."""
    if isinstance(image, Image.Image):
        return to_rgb(image)
    if isinstance(image, (str, Path)):
        return open_rgb(image)
    if isinstance(image, torch.Tensor) and image.ndim == 3 and image.shape[0] == 3 and image.is_floating_point():
        array = (image.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        return Image.fromarray(array, mode="RGB")
    shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
    raise UserInputError(f"cannot use {shape} as an image; expected float[3, H, W] in [0, 1], a PIL image or a path")


def side_by_side(left: Image.Image, right: Image.Image) -> Image.Image:
    """``left`` and ``right`` in one picture (heights matched to the taller, black padding)."""
    height = max(left.height, right.height)
    canvas = Image.new("RGB", (left.width + right.width, height))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width, 0))
    return canvas
