"""Toy generator and classifier shared by the NEMO tests: solid-colour images and a red/green classifier."""

from __future__ import annotations

import torch

from nemo_train.models.targets import Target

COLORS = ["red", "green", "blue"]
VOCAB = {"digit": list(range(10)), "color": COLORS, "angle": list(range(-30, 31, 5))}
PALETTE = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
SIZE = 8


def solid(color: int) -> torch.Tensor:
    """A ``[3, SIZE, SIZE]`` image filled with palette colour ``color``."""
    return PALETTE[color][:, None, None].expand(3, SIZE, SIZE).clone()


class SolidRenderer:
    """Toy generator: the image is filled with the colour (angle and digit ignored); counts calls."""

    attributes = VOCAB

    def __init__(self) -> None:
        self.calls = 0

    def render_batch(self, digit, color, angle, style=None):
        self.calls += 1
        return PALETTE[color.long()][:, :, None, None].expand(-1, 3, SIZE, SIZE).clone()


class RedGreenTarget(Target):
    """Toy classifier over 2 classes: logits = 3 * (mean red, mean green); records forward batch sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.class_names = ["reddish", "greenish"]
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.batch_sizes: list[int] = []

    def logits(self, images):
        self.batch_sizes.append(len(images))
        return 3.0 * images.mean((2, 3))[:, :2]

    def features(self, images):
        return images.mean((2, 3))
