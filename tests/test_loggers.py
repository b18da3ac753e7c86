"""W&B images are 8-bit RGB of the tensor's [0, 1] values (a float array reaches W&B as black)."""

from __future__ import annotations

import numpy as np
import torch

from nemo_train.loggers import wandb_image


def test_a_float_image_reaches_wandb_with_its_grey_levels():
    image = torch.full((3, 4, 5), 0.5)
    image[0, 0, 0] = 1.0
    logged = wandb_image(image, caption="grey")
    pixels = np.asarray(logged.image)
    assert pixels.dtype == np.uint8 and pixels.shape == (4, 5, 3)
    assert pixels[0, 0, 0] == 255 and pixels[1, 1, 1] == 128  # round(0.5 * 255)
    assert wandb_image(None) is None
