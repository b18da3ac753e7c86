"""The renderer contract: every sample of every split of every generated dataset re-renders bit for bit.

``datamodule.renderer.render_batch(**sample_attrs)``, rounded to uint8 as the datasets store images, gives
back the stored image exactly, for the training, validation and test splits alike.
"""

import pytest
import torch

from datamodules.base import to_uint8
from datamodules.clevr import CLEVRDataModule
from datamodules.cmnist import ANGLES, COLORS, CMNISTDataModule
from datamodules.nico import NICODataModule
from datamodules.shifts import ShiftsDataModule

DATAMODULES = {
    "cmnist": lambda: CMNISTDataModule(train_size=400, test_styles=2),
    "cmnist_background": lambda: CMNISTDataModule(train_size=200, test_styles=1, color_target="background"),
    "clevr": lambda: CLEVRDataModule(image_size=16, train_size=48, test_styles=1),
    "nico": lambda: NICODataModule(image_size=16, train_size=60, test_per_pair=2),
    "shifts": lambda: ShiftsDataModule(train_size=200, test_size=100),
}


@pytest.mark.parametrize("name", DATAMODULES)
def test_every_split_re_renders_bit_for_bit_from_its_attrs(name):
    datamodule = DATAMODULES[name]()
    datamodule.setup("fit")
    for split in ("train_set", "val_set", "test_set"):
        data = getattr(datamodule, split)
        again = to_uint8(datamodule.renderer.render_batch(**data.attrs))
        assert torch.equal(again, data.images), f"{name} {split}: {int((again != data.images).sum())} values differ"
        # one sample through the batch layout (dict of int64 attrs) and render(**attrs)
        item = data[len(data) // 2]
        single = datamodule.renderer.render(**{k: int(v) for k, v in item["attrs"].items()})
        assert torch.equal(to_uint8(single), (item["image"] * 255).round().to(torch.uint8))


def test_cmnist_splits_draw_their_exemplars_from_disjoint_pools():
    datamodule = DATAMODULES["cmnist"]()
    datamodule.setup("fit")
    pools = {
        split: set((getattr(datamodule, split).attrs["style"] >> 30).tolist())
        for split in ("train_set", "val_set", "test_set")
    }
    assert pools == {"train_set": {0}, "val_set": {1}, "test_set": {2}}
    assert datamodule.test_renderer is datamodule.renderer  # one accessor (the old name points at it)


def test_cmnist_background_colouring_paints_the_background_behind_white_strokes():
    strokes = CMNISTDataModule(train_size=20)
    background = CMNISTDataModule(train_size=20, color_target="background")
    for dm in (strokes, background):
        dm.setup("fit")
    style = strokes.renderer.style_of("test", 0)
    on_black = strokes.renderer.render(3, "blue", ANGLES[6], style)
    on_blue = background.renderer.render(3, "blue", ANGLES[6], style)
    ink = on_black.amax(0) / max(COLORS["blue"])  # the stroke intensity of the exemplar, in [0, 1]
    blue = torch.tensor(COLORS["blue"]).view(3, 1, 1)
    assert torch.allclose(on_black, ink * blue, atol=1e-6)
    assert torch.allclose(on_blue, ink + (1 - ink) * blue, atol=1e-6)
    corner, centre = on_blue[:, 0, 0], on_blue[:, 14, 14]
    assert torch.allclose(corner, blue.flatten()) and torch.allclose(centre, torch.ones(3), atol=0.05)
    # the bias and the groups do not depend on what the colour paints
    assert torch.equal(strokes.test_set.groups, background.test_set.groups)
