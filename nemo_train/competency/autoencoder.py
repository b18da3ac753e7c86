"""The reconstruction model of the PaRCE competency estimator (competency-counterfactuals paper, Sec. 2.1).

A convolutional encoder maps an image to a latent vector and a mirrored decoder maps it back. It is
trained with the mean squared error on the classifier's training distribution, so that images unlike
that distribution reconstruct badly; LGD and LNN (Sec. 3.1) search in its latent space.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from nemo_train.errors import UserInputError


class CompetencyAutoencoder(L.LightningModule):
    """Convolutional autoencoder ``image -> latent [B, latent_dim] -> image`` trained with pixel MSE.

    Each encoder stage is a stride-2 ``conv -> ReLU``; a linear layer maps the last feature map to the
    latent vector. The decoder mirrors it: linear, then per stage an upsampling to the encoder's size at
    that stage and a ``conv -> ReLU`` (the last conv is linear). The loss is taken on that linear output;
    ``decode`` / ``forward`` clamp it to ``[0, 1]``. (A sigmoid output saturates on sparse images such as
    CMNIST, where most pixels are black, and the model collapses to an all-black reconstruction.)

    Args:
        image_size: side of the (square) input images.
        in_chans: number of image channels.
        widths: channels of the encoder stages (the decoder uses them in reverse).
        latent_dim: size of the latent vector.
        lr, weight_decay: AdamW settings.
    """

    def __init__(
        self,
        image_size: int = 28,
        in_chans: int = 3,
        widths: Sequence[int] = (32, 64, 64),
        latent_dim: int = 64,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if image_size < 4 or image_size >> len(widths) < 1:
            raise UserInputError(f"image_size={image_size} is too small for {len(widths)} stride-2 stages")
        if latent_dim < 1 or not widths:
            raise UserInputError(f"latent_dim={latent_dim} and widths={list(widths)}; expected positive sizes")
        self.save_hyperparameters()
        widths = list(widths)
        sizes = [image_size]
        for _ in widths:
            sizes.append((sizes[-1] + 1) // 2)
        self.sizes = sizes  # spatial size before each stage and after the last one
        encoder, channels = [], in_chans
        for width in widths:
            encoder += [nn.Conv2d(channels, width, 3, stride=2, padding=1), nn.ReLU(inplace=True)]
            channels = width
        self.encoder_conv = nn.Sequential(*encoder)
        flat = widths[-1] * sizes[-1] ** 2
        self.to_latent = nn.Linear(flat, latent_dim)
        self.from_latent = nn.Sequential(nn.Linear(latent_dim, flat), nn.ReLU(inplace=True))
        outs = widths[-2::-1] + [in_chans]
        self.decoder_convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, 3, padding=1) for c_in, c_out in zip(widths[::-1], outs)
        )

    # ----------------------------------------------------------------- model API
    def reset_parameters(self) -> None:
        """Draw every weight afresh from the current random state (each layer's default initialisation).

        A config parser builds the model before a run sets its seed; calling this after seeding makes
        the initial weights, and so the trained autoencoder, follow the seed.
        """
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def check_images(self, images: torch.Tensor) -> None:
        """Raise :class:`UserInputError` unless ``images`` is ``[B, in_chans, image_size, image_size]``."""
        hp = self.hparams
        expected = (hp.in_chans, hp.image_size, hp.image_size)
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or tuple(images.shape[1:]) != expected:
            shape = list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise UserInputError(
                f"the competency autoencoder expects images of shape [B, {', '.join(map(str, expected))}], got {shape}"
            )

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Latent vectors ``[B, latent_dim]`` of images in ``[0, 1]``."""
        self.check_images(images)
        return self.to_latent(self.encoder_conv(images).flatten(1))

    def decode_linear(self, latents: torch.Tensor) -> torch.Tensor:
        """The decoder's unclamped output ``[B, C, H, W]``."""
        widths = self.hparams.widths
        x = self.from_latent(latents).view(len(latents), widths[-1], self.sizes[-1], self.sizes[-1])
        for i, conv in enumerate(self.decoder_convs):
            x = conv(F.interpolate(x, size=self.sizes[-2 - i], mode="nearest"))
            if i < len(self.decoder_convs) - 1:
                x = F.relu(x)
        return x

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Images ``[B, C, H, W]`` in ``[0, 1]`` from latent vectors."""
        return self.decode_linear(latents).clamp(0.0, 1.0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``decode(encode(images))`` in ``[0, 1]``."""
        return self.decode(self.encode(images))

    def reconstruction_loss(self, images: torch.Tensor) -> torch.Tensor:
        """Per-image mean squared error ``[B]`` of the unclamped reconstruction (differentiable)."""
        return (self.decode_linear(self.encode(images)) - images).pow(2).flatten(1).mean(1)

    # ----------------------------------------------------------------- training
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.reconstruction_loss(batch["image"]).mean()
        self.log("train/reco_mse", loss, prog_bar=True, batch_size=len(batch["image"]))
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss = self.reconstruction_loss(batch["image"]).mean()
        self.log("val/reco_mse", loss, prog_bar=True, batch_size=len(batch["image"]))

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.log("test/reco_mse", self.reconstruction_loss(batch["image"]).mean(), batch_size=len(batch["image"]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
