"""Toy competency components whose losses and probabilities are known in closed form."""

import torch
from torch import nn

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.parce import PaRCE


class ZeroAutoencoder(CompetencyAutoencoder):
    """Reconstructs every image as black, so the loss of an image is the mean of its squared pixels."""

    def decode_linear(self, latents):
        size = self.hparams.image_size
        return torch.zeros(len(latents), 3, size, size) + 0 * latents.sum()


class ShrinkAutoencoder(CompetencyAutoencoder):
    """Latent ``[logit(0.9 * mean intensity), 1]``; decodes to a flat image of that intensity.

    Flat images of intensity ``m`` reconstruct with loss ``(0.1 m)^2``, so darker images are more
    in-distribution, and moving the first latent coordinate down darkens the decoded image.
    """

    def encode(self, images):
        self.check_images(images)
        m = (0.9 * images.mean((1, 2, 3))).clamp(1e-4, 1 - 1e-4)
        return torch.stack([torch.logit(m), torch.ones_like(m)], 1)

    def decode_linear(self, latents):
        size = self.hparams.image_size
        return torch.sigmoid(latents[:, :1, None, None]).expand(-1, 3, size, size)


class MeanClassifier(nn.Module):
    """Two classes; features = per-channel means; logit of class 0 grows as the image gets darker."""

    def features(self, images):
        return images.mean((2, 3))

    def forward(self, images):
        m = self.features(images).mean(1, keepdim=True)
        return torch.cat([8 * (0.5 - m), 8 * (m - 0.5)], 1)


def constant_images(values, size=8):
    return torch.tensor(values, dtype=torch.float32).view(-1, 1, 1, 1).expand(-1, 3, size, size).contiguous()


def toy_estimator_fitted(autoencoder_class=ZeroAutoencoder):
    """PaRCE on ZeroAutoencoder + MeanClassifier, calibrated on constant images of class 0 and 1."""
    torch.manual_seed(0)
    autoencoder = autoencoder_class(image_size=8, widths=(4,), latent_dim=4)
    estimator = PaRCE(MeanClassifier(), autoencoder, num_classes=2)
    values = torch.linspace(0.05, 0.35, 12).tolist() + torch.linspace(0.65, 0.95, 12).tolist()
    labels = torch.tensor([0] * 12 + [1] * 12)
    images = constant_images(values)
    loader = [{"image": images[i : i + 8], "label": labels[i : i + 8]} for i in range(0, 24, 8)]
    return estimator.fit(loader)
