"""NICO++: the synthetic generator, correlation levels actually achieved, and the real-folder layout."""

import os
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch
from matplotlib.colors import rgb_to_hsv
from PIL import Image

from datamodules.folder import UnreadableImagesWarning
from datamodules.nico import (
    CLASSES,
    CONTEXTS,
    CORRELATED_CONTEXT,
    NICODataModule,
    NICORenderer,
    biased_counts,
    parse_correlated_context,
)
from nemo_train.errors import UserInputError


@pytest.fixture(scope="module")
def renderer():
    return NICORenderer(image_size=32, supersample=1)


def test_render_is_deterministic_and_matches_batch(renderer):
    a = renderer.render("birds", "water", style=11)
    assert a.shape == (3, 32, 32) and 0 <= a.min() and a.max() <= 1
    assert torch.equal(a, renderer.render(1, 5, style=11))
    batch = renderer.render_batch(torch.tensor([0, 1]), torch.tensor([2, 5]), torch.tensor([3, 11]))
    assert torch.allclose(batch[1], a, atol=1e-6)
    assert not torch.equal(a, renderer.render("birds", "water", style=12))
    assert NICORenderer.attributes == {"object": CLASSES, "context": CONTEXTS}


def test_context_sets_the_background_statistics(renderer):
    def background_stats(context):
        images = renderer.render_batch(
            torch.zeros(16, dtype=torch.long), torch.full((16,), CONTEXTS.index(context)), torch.arange(16)
        )
        border = torch.cat([images[..., :3, :].flatten(2), images[..., -3:, :].flatten(2)], -1)  # top and bottom rows
        hsv = rgb_to_hsv(border.permute(0, 2, 1).reshape(-1, 3).numpy())
        return border.mean().item(), border.mean((0, 2)), hsv

    brightness = {c: background_stats(c)[0] for c in CONTEXTS}
    assert brightness["dim_lighting"] == min(brightness.values()) and brightness["dim_lighting"] < 0.25
    grass = background_stats("grass")[1]
    assert grass[1] > grass[0] and grass[1] > grass[2]  # green dominates
    water = background_stats("water")[1]
    assert water[2] > water[1] > water[0]  # blue dominates
    autumn = background_stats("autumn")[1]
    assert autumn[0] > autumn[1] > autumn[2]  # orange / brown
    assert background_stats("rock")[2][:, 1].mean() < 0.15  # grey: low saturation
    outdoor = background_stats("outdoor")[1]
    assert outdoor[2] > outdoor[0]  # sky blue at the top


def test_object_changes_only_the_glyph(renderer):
    base = renderer.render("mammals", "rock", style=5)
    masks = []
    for obj in CLASSES:
        image = renderer.render(obj, "rock", style=5)
        changed = (image - renderer.render(obj, "grass", style=5)).abs().amax(0) > 0.01
        masks.append(~changed)  # pixels that do not depend on the context: the glyph
    areas = [m.sum().item() for m in masks]
    assert all(a > 30 for a in areas), areas
    for i in range(len(CLASSES)):
        for j in range(i + 1, len(CLASSES)):
            assert (masks[i] ^ masks[j]).sum() > 20, (CLASSES[i], CLASSES[j])
    # Same style and class in two contexts: glyph pixels identical, background different.
    other = renderer.render("mammals", "grass", style=5)
    assert torch.equal(base[:, masks[0]], other[:, masks[0]])


def test_dim_lighting_darkens_the_object_too(renderer):
    bright = renderer.render("landways", "rock", style=3)
    dim = renderer.render("landways", "dim_lighting", style=3)
    glyph = (bright - renderer.render("landways", "water", style=3)).abs().amax(0) < 0.01
    assert glyph.sum() > 30
    assert torch.allclose(dim[:, glyph], bright[:, glyph] * 0.35, atol=1e-5)


def test_biased_counts():
    assert biased_counts(100, 0.85) == [85, 3, 3, 3, 3, 3]
    assert biased_counts(20, 0.75) == [15, 1, 1, 1, 1, 1]
    assert sum(biased_counts(97, 0.95)) == 97


@pytest.mark.parametrize("correlation", [0.75, 0.85, 0.95])
def test_correlation_level_is_achieved_exactly(correlation):
    dm = NICODataModule(correlation=correlation, image_size=16, train_size=300, test_per_pair=2)
    dm.setup()
    for split in (dm.train_set, dm.val_set):
        label, context = split.attrs["object"], split.attrs["context"]
        for ci, name in enumerate(CLASSES):
            mine = context[label == ci]
            share = (mine == CONTEXTS.index(CORRELATED_CONTEXT[name])).float().mean().item()
            assert abs(share - correlation) <= 1.0 / len(mine), (name, share)
        assert torch.equal(
            split.groups,
            (context != torch.tensor([CONTEXTS.index(CORRELATED_CONTEXT[c]) for c in CLASSES])[label]).long(),
        )
    assert len(dm.train_set) == 300 and len(dm.val_set) == 75
    # Unbiased test: every class-context pair equally often.
    pairs = dm.test_set.attrs["object"] * 6 + dm.test_set.attrs["context"]
    assert torch.equal(torch.bincount(pairs, minlength=36), torch.full((36,), 2))
    assert dm.eval_groupings == {"context": CONTEXTS} and dm.context_names == CONTEXTS
    assert dm.num_classes == 6 and dm.class_names == CLASSES
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "label", "group", "attrs"} and set(batch["attrs"]) == {"object", "context", "style"}
    i = 5
    t = dm.test_set.attrs
    again = dm.renderer.render(int(t["object"][i]), int(t["context"][i]), style=int(t["style"][i]))
    assert (dm.test_set[i]["image"] - again).abs().max() <= 1 / 255 + 1e-6


def test_bad_specs_raise_user_input_error(tmp_path):
    with pytest.raises(UserInputError, match="unknown NICO\\+\\+ context 'beach'"):
        NICODataModule(correlated_context={**CORRELATED_CONTEXT, "birds": "beach"})
    with pytest.raises(UserInputError, match="unknown class"):
        parse_correlated_context({**CORRELATED_CONTEXT, "fish": "water"})
    with pytest.raises(UserInputError, match="lacks class"):
        parse_correlated_context({"birds": "grass"})
    with pytest.raises(UserInputError, match="correlation=1.5"):
        NICODataModule(correlation=1.5)
    with pytest.raises(UserInputError, match="NICO\\+\\+ data folder .*missing.* does not exist"):
        NICODataModule(data_dir=str(tmp_path / "missing"))
    with pytest.raises(UserInputError, match="unknown NICO\\+\\+ context 'snow'"):
        NICORenderer(16).render("birds", "snow")


def _write_nico(root, per_cell: int, corrupt: int):
    rng = np.random.default_rng(0)
    count = 0
    for context in CONTEXTS:
        folder_name = "dim" if context == "dim_lighting" else context  # NICO++'s own name for dim lighting
        for name in CLASSES:
            folder = root / folder_name / name
            folder.mkdir(parents=True)
            n = per_cell * (4 if CORRELATED_CONTEXT[name] == context else 1)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
                count += 1
    for i in range(corrupt):
        (root / "rock" / "birds" / f"{i}.jpg").write_bytes(b"not a jpeg")
    return count


def test_real_folder_builds_biased_and_unbiased_splits(tmp_path):
    total = _write_nico(tmp_path, per_cell=6, corrupt=2)
    dm = NICODataModule(data_dir=str(tmp_path), correlation=0.75, image_size=8, test_per_pair=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup()
    assert sum(issubclass(w.category, UnreadableImagesWarning) for w in caught) == 1
    assert dm.num_skipped_images == 2 and dm.renderer is None
    assert dm.train_set.images.shape[1:] == (3, 8, 8)
    pairs = dm.test_set.attrs["object"] * 6 + dm.test_set.attrs["context"]
    assert torch.equal(torch.bincount(pairs, minlength=36), torch.full((36,), 2))
    # Correlated cells hold 24 images (22 after the test draw); with 4 per other cell the largest 75 % split is
    # 20 others -> 60 correlated ... capped by 22 correlated -> 22 correlated + 7 others (29 total).
    label = torch.cat([dm.train_set.attrs["object"], dm.val_set.attrs["object"]])
    context = torch.cat([dm.train_set.attrs["context"], dm.val_set.attrs["context"]])
    for ci, name in enumerate(CLASSES):
        mine = context[label == ci]
        share = (mine == CONTEXTS.index(CORRELATED_CONTEXT[name])).float().mean().item()
        assert abs(share - 0.75) <= 1.0 / len(mine), (name, share, len(mine))
    used = len(dm.train_set) + len(dm.val_set) + len(dm.test_set)
    assert used <= total - 2
    files = torch.cat([d.attrs["style"] for d in (dm.train_set, dm.val_set, dm.test_set)])
    assert len(files.unique()) == len(files)  # no image in two splits


def test_real_folder_missing_context(tmp_path):
    (tmp_path / "rock").mkdir()
    dm = NICODataModule(data_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="no context folder 'dim_lighting'"):
        dm.setup()


@pytest.mark.parametrize("level", [75, 85, 95])
def test_config_instantiates(level, preset_cli):
    from nemo_train.models import ClassifierModule

    cli = preset_cli(f"nico/nico{level}_resnet50.yaml")
    assert isinstance(cli.datamodule, NICODataModule) and cli.datamodule.hparams.correlation == level / 100
    assert isinstance(cli.model, ClassifierModule) and cli.model.hparams.backbone == "resnet50"
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes and cli.model.hparams.pretrained is False
