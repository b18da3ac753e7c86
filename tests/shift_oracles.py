"""Hand-made shifts classifiers whose failures are known exactly: they read each image's rendered attributes.

:class:`AttributeOracle` is a :class:`~nemo_train.models.targets.Target` (an ``nn.Module``) that knows the
attributes of every image it may be shown (looked up by the image's uint8 bytes, as the renderer draws it) and
answers the true digit unless ``fails(attributes)`` says it errs, then the next digit. So the cause of each of its
errors is known without training anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from datamodules.base import to_uint8
from datamodules.shifts import CAUSE_FACTORS, FACTS
from nemo_train.models.targets import Target

TYPICAL = {name: FACTS.factor(name).typical_stored for name in CAUSE_FACTORS}


def off_typical(attrs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``bool[N, len(CAUSE_FACTORS)]``: which cause-able factors of each image are off their typical value."""
    return torch.stack([attrs[name] != TYPICAL[name] for name in CAUSE_FACTORS], 1)


def restorations(attrs: Mapping[str, torch.Tensor]) -> list[dict[str, int]]:
    """Every image of ``attrs`` and each of its single-factor restorations (what the cause search renders)."""
    rows = [{k: int(v[i]) for k, v in attrs.items()} for i in range(len(next(iter(attrs.values()))))]
    out = list(rows)
    for row in rows:
        out += [{**row, name: TYPICAL[name]} for name in CAUSE_FACTORS if row[name] != TYPICAL[name]]
    return out


class AttributeOracle(Target):
    """Right on every image it knows unless ``fails(attributes)``; an unknown image is an error of the test."""

    def __init__(self, renderer, known: list[dict[str, int]], fails: Callable[[dict[str, int]], bool]) -> None:
        super().__init__()
        self.class_names = list(FACTS.classes)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the module a device
        self.answers: dict[bytes, int] = {}
        batch = {k: torch.tensor([a[k] for a in known]) for k in known[0]}
        for attrs, image in zip(known, to_uint8(renderer.render_batch(**batch))):
            self.answers[image.numpy().tobytes()] = (attrs["digit"] + int(bool(fails(attrs)))) % 10

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        keys = [image.numpy().tobytes() for image in to_uint8(images.cpu())]
        missing = sum(key not in self.answers for key in keys)
        if missing:
            raise AssertionError(f"the oracle was shown {missing} image(s) it does not know")
        return F.one_hot(torch.tensor([self.answers[k] for k in keys]), 10).float() * 10.0

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.logits(images)
