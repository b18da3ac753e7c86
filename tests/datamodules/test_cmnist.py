import pytest
import torch

from datamodules.cmnist import ANGLES, COLOR_NAMES, COLORS, BiasSpec, CMNISTDataModule, CMNISTRenderer, load_digits
from nemo_train.errors import UserInputError


@pytest.fixture(scope="module")
def renderer():
    return CMNISTRenderer(*load_digits(None, "train"))


def test_embedded_digits_need_no_download():
    images, labels = load_digits(None, "train")
    assert images.shape[1:] == (28, 28) and 0 <= images.min() and images.max() <= 1
    assert set(labels.tolist()) == set(range(10))


def test_render_is_deterministic_and_sized(renderer):
    a = renderer.render(3, "red", 15, style=7)
    b = renderer.render(3, "red", 15, style=7)
    assert a.shape == (3, 28, 28)
    assert torch.equal(a, b)


def test_changing_colour_changes_only_the_hue(renderer):
    red = renderer.render(5, "red", 0, style=2)
    blue = renderer.render(5, "blue", 0, style=2)
    # same stroke mask, colour given by the palette
    assert torch.equal(red.amax(0) > 0.05, (blue.amax(0) > 0.05))
    assert red[0].sum() > 0 and red[1:].sum() == 0
    r, g, b = COLORS["blue"]
    assert torch.allclose(blue[2] * r, blue[0] * b)  # channels are proportional to the palette colour


def test_rotation_moves_pixels_but_keeps_mass(renderer):
    upright = renderer.render(1, "grey", 0, style=0)
    turned = renderer.render(1, "grey", 30, style=0)
    assert not torch.allclose(upright, turned)
    assert turned.sum() == pytest.approx(upright.sum().item(), rel=0.1)


def test_presets_match_paper_002():
    a, b = BiasSpec.parse("model_a"), BiasSpec.parse("model_b")
    assert a.colors_for(3) == ("red",) and len(a.colors_for(7)) == 10
    assert b.colors_for(7) == ("blue",) and len(b.colors_for(3)) == 10
    assert a.allowed_matrix().sum() == 5 * 1 + 5 * 10


def test_unknown_colour_is_a_clear_error():
    with pytest.raises(UserInputError, match="unknown colour.*'reed'"):
        BiasSpec.parse({0: ["reed"]})
    with pytest.raises(UserInputError, match="unknown CMNIST bias preset"):
        CMNISTDataModule(bias="model_c")


def test_missing_data_folder_is_a_clear_error(tmp_path):
    dm = CMNISTDataModule(data_dir=str(tmp_path / "nope"), train_size=20)
    with pytest.raises(UserInputError, match="does not exist"):
        dm.setup("fit")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserInputError, match="no MNIST found"):
        CMNISTDataModule(data_dir=str(empty), train_size=20).setup("fit")


def test_splits_follow_the_bias():
    dm = CMNISTDataModule(bias="model_a", train_size=2000, test_styles=1)
    dm.setup("fit")
    train = dm.train_set
    assert len(train) == 2000 and len(dm.val_set) == 500
    assert train.groups.sum() == 0  # training data is bias-aligned only
    low = train.attrs["digit"] < 5
    assert (train.attrs["color"][low] == COLOR_NAMES.index("red")).all()
    assert len(train.attrs["color"][~low].unique()) == 10
    # the test split is the full digit x colour x angle grid
    test = dm.test_set
    assert len(test) == 10 * 10 * len(ANGLES) == 1300
    cells = set(zip(test.attrs["digit"].tolist(), test.attrs["color"].tolist(), test.attrs["angle"].tolist()))
    assert len(cells) == 1300
    # conflicting = digits 0-4 in a colour other than red: 5 digits x 9 colours x 13 angles
    assert test.groups.sum() == 5 * 9 * 13
    item = test[0]
    assert set(item) == {"image", "label", "group", "attrs"} and set(item["attrs"]) == {
        "digit",
        "color",
        "angle",
        "style",
    }


def test_sample_attrs_re_render_the_sample():
    dm = CMNISTDataModule(train_size=50)
    dm.setup("fit")
    item = dm.train_set[11]
    again = dm.renderer.render(**{k: int(v) for k, v in item["attrs"].items()})
    assert torch.allclose(item["image"], again, atol=1 / 255)
