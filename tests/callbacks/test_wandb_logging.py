"""The sample grid reaches W&B in its real colours."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from lightning.pytorch.loggers import WandbLogger

from nemo_train.callbacks.wandb_logging import SampleGridCallback


class RecordingWandb(WandbLogger):
    def __init__(self):  # no run is started
        self.images = []

    def log_image(self, key, images, **kwargs):
        self.images.append((key, images, kwargs))


def test_the_training_grid_is_logged_as_8_bit_rgb_with_the_images_colours():
    images = torch.zeros(2, 3, 4, 4)
    images[0, 0] = 1.0  # red
    images[1, 2] = 0.5  # half blue
    batch = {"image": images, "label": torch.tensor([3, 7]), "group": torch.tensor([0, 1])}
    datamodule = SimpleNamespace(train_dataloader=lambda: [batch], group_names=["aligned", "conflicting"])
    logger = RecordingWandb()
    trainer = SimpleNamespace(loggers=[logger], is_global_zero=True, datamodule=datamodule, global_step=0)
    SampleGridCallback(num_images=2, nrow=2).on_train_start(trainer, None)
    ((key, (picture,), kwargs),) = logger.images
    assert key == "samples/train_grid" and kwargs["caption"] == ["3/aligned 7/conflicting"]
    assert picture.mode == "RGB" and picture.size == (2 + 2 * (4 + 2), 4 + 4)
    assert picture.getpixel((2, 2)) == (255, 0, 0)  # the first image, inside the padding
    assert picture.getpixel((2 + 4 + 2, 2)) == (0, 0, 128)
    assert picture.getpixel((0, 0)) == (255, 255, 255)  # the padding
