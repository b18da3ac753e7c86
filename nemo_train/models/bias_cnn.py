"""The small CNN of the model-differences paper (App. A.3), registered in timm as ``bias_cnn``.

Four 7x7 convolutions, each followed by batch normalisation and ReLU, then global average pooling
and a linear head. It follows timm's model API (``forward_features`` / ``forward_head``,
``num_features``, ``reset_classifier``) so it is created like any timm model:
``timm.create_model("bias_cnn", num_classes=10)``.
"""

from __future__ import annotations

import torch
from timm.models import register_model
from torch import nn

from nemo_train.errors import UserInputError


class BiasCNN(nn.Module):
    """Four 7x7 conv + BN + ReLU blocks (widths ``widths``, the last three with stride 2) and a linear head."""

    def __init__(
        self,
        num_classes: int = 10,
        in_chans: int = 3,
        widths: tuple[int, ...] = (16, 32, 64, 128),
        drop_rate: float = 0.0,
    ) -> None:
        super().__init__()
        layers, channels = [], in_chans
        for i, width in enumerate(widths):
            layers += [
                nn.Conv2d(channels, width, 7, stride=1 if i == 0 else 2, padding=3, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            channels = width
        self.features = nn.Sequential(*layers)
        self.num_features = channels
        self.num_classes = num_classes
        self.drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(channels, num_classes) if num_classes > 0 else nn.Identity()
        self.pretrained_cfg = {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0), "input_size": (in_chans, 28, 28)}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.drop(x.mean(dim=(2, 3)))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


@register_model
def bias_cnn(pretrained: bool = False, **kwargs) -> BiasCNN:
    """The model-differences paper's CNN (random init; it has no published weights)."""
    if pretrained:
        raise UserInputError("bias_cnn has no pretrained weights; set pretrained: false")
    for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
        kwargs.pop(key, None)
    return BiasCNN(**kwargs)
