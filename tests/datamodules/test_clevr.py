"""Single-object CLEVR: the renderer, the material bias, the splits and real-render folders."""

import json
import os
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch
from matplotlib.colors import rgb_to_hsv
from PIL import Image
from training_seed import TRAINING_SEED

from datamodules.clevr import (
    ATTRIBUTES,
    COLOR_NAMES,
    MATERIALS,
    SHAPES,
    CLEVRDataModule,
    CLEVRRenderer,
    MaterialBias,
)
from datamodules.folder import UnreadableImagesWarning
from nemo_train.errors import UserInputError


@pytest.fixture(scope="module")
def renderer():
    return CLEVRRenderer(image_size=48, supersample=2)


def test_render_is_deterministic_and_matches_batch(renderer):
    a = renderer.render("cube", "metal", "red", "large", style=7)
    b = renderer.render(0, 0, 1, 2, style=7)
    assert a.shape == (3, 48, 48) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert 0.0 <= a.min() and a.max() <= 1.0
    batch = renderer.render_batch(
        torch.tensor([2, 0]), torch.tensor([1, 0]), torch.tensor([3, 1]), torch.tensor([0, 2]), torch.tensor([5, 7])
    )
    assert torch.allclose(batch[1], a, atol=1e-6)
    assert torch.allclose(batch[0], renderer.render("sphere", "rubber", "green", "small", style=5), atol=1e-6)


def test_attribute_vocabulary():
    assert CLEVRRenderer.attributes == {
        "shape": SHAPES,
        "material": MATERIALS,
        "color": COLOR_NAMES,
        "size": ["small", "medium", "large"],
    }
    assert len(COLOR_NAMES) == 8 and "gray" in COLOR_NAMES and "cyan" in COLOR_NAMES
    assert np.prod([len(v) for v in ATTRIBUTES.values()]) == 144


def _saturated(image: torch.Tensor, threshold: float = 0.35) -> np.ndarray:
    hsv = rgb_to_hsv(image.permute(1, 2, 0).numpy())
    return hsv, hsv[..., 1] > threshold


@pytest.mark.parametrize("shape", SHAPES)
def test_metal_is_a_tinted_mirror_rubber_is_matte(renderer, shape):
    for color in ("red", "blue", "yellow", "green"):
        metal = renderer.render(shape, "metal", color, "large")
        rubber = renderer.render(shape, "rubber", color, "large")
        # Only the object changes: the floor far from it is identical.
        assert torch.equal(metal[:, :4, :4], rubber[:, :4, :4])
        changed = ((metal - rubber).abs().amax(0) > 0.02).numpy()
        assert changed.sum() > 100
        hsv_m, hsv_r = (rgb_to_hsv(x.permute(1, 2, 0).numpy()) for x in (metal, rubber))
        # Metal mirrors the grey surroundings: its pixels are much less saturated than the matte colour.
        assert hsv_m[..., 1][changed].mean() < hsv_r[..., 1][changed].mean() - 0.15, (shape, color)
        # Specular highlights (bright, desaturated pixels): on curved metal they appear, rubber has none.
        highlight_m = ((hsv_m[..., 2] > 0.85) & (hsv_m[..., 1] < 0.35)).sum()
        highlight_r = ((hsv_r[..., 2] > 0.85) & (hsv_r[..., 1] < 0.35)).sum()
        assert highlight_r == 0
        if shape == "sphere":
            assert highlight_m >= 5, (color, highlight_m)


def test_colour_sets_the_mean_hue(renderer):
    # Reference hues (matplotlib's HSV) of the CLEVR colours: red ~0, green ~0.3, blue ~0.63, purple ~0.77.
    expected = {"red": 0.0, "green": 0.31, "blue": 0.64, "purple": 0.77, "cyan": 0.5}
    for color, hue in expected.items():
        hsv, saturated = _saturated(renderer.render("sphere", "rubber", color, "large"))
        assert saturated.sum() > 50
        mean = hsv[..., 0][saturated]
        # circular distance
        dist = np.minimum(np.abs(mean - hue), 1 - np.abs(mean - hue)).mean()
        assert dist < 0.05, (color, dist)


def test_size_grows_the_object_and_style_moves_it(renderer):
    areas = [
        _saturated(renderer.render("cube", "rubber", "red", size))[1].sum() for size in ("small", "medium", "large")
    ]
    assert areas[0] < areas[1] < areas[2]
    assert areas[2] / areas[0] > 2.5
    canonical = _saturated(renderer.render("sphere", "rubber", "blue", "medium", style=0))[1]
    ys, xs = np.nonzero(canonical)
    assert abs(xs.mean() - 23.5) < 2.5  # centred horizontally in the canonical view
    moved = [renderer.render("sphere", "rubber", "blue", "medium", style=s) for s in (1, 2, 3)]
    assert all(not torch.equal(m, renderer.render("sphere", "rubber", "blue", "medium", style=0)) for m in moved)
    assert not torch.equal(moved[0], moved[1])


def test_shapes_have_different_silhouettes(renderer):
    masks = [_saturated(renderer.render(s, "rubber", "red", "large"))[1] for s in SHAPES]
    for i in range(3):
        for j in range(i + 1, 3):
            assert (masks[i] ^ masks[j]).sum() > 40


def test_bad_attributes_raise_user_input_error(renderer):
    with pytest.raises(UserInputError, match="unknown CLEVR color 'orange'"):
        renderer.render("cube", "metal", "orange", "large")
    with pytest.raises(UserInputError, match="material index 5"):
        renderer.render("cube", 5, "red", "large")
    with pytest.raises(UserInputError, match="shape indices"):
        renderer.render_batch(torch.tensor([3]), torch.tensor([0]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(UserInputError, match="image_size=4 is out of range"):
        CLEVRRenderer(image_size=4)


def test_bias_spec_validation():
    assert MaterialBias.parse("metal").favoured_material == "metal"
    with pytest.raises(UserInputError, match="unknown material 'wood'"):
        CLEVRDataModule(bias={"favoured_material": "wood"})
    with pytest.raises(UserInputError, match="unknown shortcut_shape 'cone'"):
        MaterialBias.parse({"favoured_material": "rubber", "shortcut_shape": "cone"})
    with pytest.raises(UserInputError, match="favoured_fraction=1.5"):
        MaterialBias.parse({"favoured_fraction": 1.5})
    with pytest.raises(UserInputError, match="unknown CLEVR bias field"):
        MaterialBias.parse({"favoured_colour": "red"})
    with pytest.raises(UserInputError, match="unknown CLEVR bias preset 'glass'"):
        MaterialBias.parse("glass")
    probs = MaterialBias.parse(
        {"favoured_material": "rubber", "favoured_fraction": 0.9, "shortcut_fraction": 0.7}
    ).material_probs()
    rubber, metal = MATERIALS.index("rubber"), MATERIALS.index("metal")
    assert torch.allclose(probs[SHAPES.index("cube"), [rubber, metal]], torch.tensor([0.9, 0.1]))
    assert torch.allclose(probs[SHAPES.index("cylinder"), [rubber, metal]], torch.tensor([0.3, 0.7]))
    assert torch.allclose(probs.sum(1), torch.ones(3))


def test_splits_follow_the_bias_and_the_test_grid_is_complete():
    dm = CLEVRDataModule(
        bias={"favoured_material": "metal", "favoured_fraction": 0.9, "shortcut_shape": "sphere"},
        image_size=16,
        train_size=1200,
        test_styles=2,
    )
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (1200, 300, 288)
    assert dm.num_classes == 3 and dm.class_names == SHAPES and dm.group_names == ["aligned", "conflicting"]
    assert dm.eval_groupings == {"material": MATERIALS}
    attrs = dm.train_set.attrs
    metal = MATERIALS.index("metal")
    non_shortcut = attrs["shape"] != SHAPES.index("sphere")
    achieved = (attrs["material"][non_shortcut] == metal).float().mean().item()
    n = int(non_shortcut.sum())
    assert abs(achieved - 0.9) < 3 * (0.9 * 0.1 / n) ** 0.5
    spheres = attrs["material"][~non_shortcut].float().mean().item()  # half metal, half rubber
    assert 0.4 < spheres < 0.6
    assert torch.equal(dm.train_set.labels, attrs["shape"])
    assert torch.equal(dm.train_set.groups, (attrs["material"] != metal).long())
    # Test grid: every one of the 144 cells exactly test_styles times.
    t = dm.test_set.attrs
    cells = ((t["shape"] * 2 + t["material"]) * 8 + t["color"]) * 3 + t["size"]
    assert torch.equal(torch.bincount(cells, minlength=144), torch.full((144,), 2))
    assert set(t["style"].tolist()).isdisjoint(attrs["style"].tolist())
    # Stored images are the renderer's output for the stored attributes.
    i = 17
    again = dm.renderer.render(
        *(int(t[k][i]) for k in ("shape", "material", "color", "size")), style=int(t["style"][i])
    )
    assert (dm.test_set[i]["image"] - again).abs().max() <= 1 / 255 + 1e-6
    batch = next(iter(dm.train_dataloader()))
    assert batch["image"].shape == (128, 3, 16, 16) and batch["label"].dtype == torch.int64
    assert set(batch["attrs"]) == {"shape", "material", "color", "size", "style"}
    # Same seed, same data.
    dm2 = CLEVRDataModule(bias=dict(dm.hparams.bias), image_size=16, train_size=1200, test_styles=2)
    dm2.setup()
    assert torch.equal(dm2.train_set.images, dm.train_set.images)


def _write_real_clevr(root, renderer, corrupt: int = 1, layout: str = "records"):
    (root / "images").mkdir(parents=True)
    records = []
    grid = torch.meshgrid(*(torch.arange(len(v)) for v in ATTRIBUTES.values()), indexing="ij")
    combos = torch.stack([g.flatten() for g in grid], 1)
    for i, (s, m, c, z) in enumerate(combos.tolist() * 2):
        name = f"CLEVR_{i:06d}.png"
        img = renderer.render(s, m, c, z, style=i + 1)
        Image.fromarray(img.mul(255).round().byte().permute(1, 2, 0).numpy()).save(root / "images" / name)
        records.append(
            {
                "file": f"images/{name}",
                "shape": SHAPES[s],
                "material": MATERIALS[m],
                "color": COLOR_NAMES[c],
                "size": ATTRIBUTES["size"][z],
            }
        )
    for i in range(corrupt):
        (root / "images" / records[i]["file"].split("/")[-1]).write_bytes(b"\x89PNG broken")
    if layout == "scenes":
        scenes = [
            {
                "image_filename": r["file"].split("/")[-1],
                "objects": [{k: r[k] for k in ("shape", "material", "color", "size")}],
            }
            for r in records
        ]
        (root / "attributes.json").write_text(json.dumps({"info": {}, "scenes": scenes}))
    else:
        (root / "attributes.json").write_text(json.dumps(records))
    return records


@pytest.mark.parametrize("layout", ["records", "scenes"])
def test_real_folder_loads_skips_corrupt_and_splits(tmp_path, layout):
    records = _write_real_clevr(tmp_path, CLEVRRenderer(16), corrupt=2, layout=layout)
    dm = CLEVRDataModule(data_dir=str(tmp_path), bias="rubber", image_size=16, train_size=1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup()
    assert sum(issubclass(w.category, UnreadableImagesWarning) for w in caught) == 1
    assert dm.num_skipped_images == 2
    assert dm.renderer is None
    total = len(dm.train_set) + len(dm.val_set) + len(dm.test_set)
    assert len(dm.test_set) >= 144 and total <= len(records) - 2
    # The biased pool keeps only rubber for cube and sphere (favoured_fraction 1.0).
    a = dm.train_set.attrs
    rubber = MATERIALS.index("rubber")
    assert (a["material"][a["shape"] != SHAPES.index("cylinder")] == rubber).all()
    # The test split covers every attribute cell.
    t = dm.test_set.attrs
    cells = ((t["shape"] * 2 + t["material"]) * 8 + t["color"]) * 3 + t["size"]
    assert len(cells.unique()) == 144
    # ``style`` holds the record index: the two corrupt files (records 0 and 1) are gone.
    styles = torch.cat([d.attrs["style"] for d in (dm.train_set, dm.val_set, dm.test_set)])
    assert styles.min() >= 2 and len(styles.unique()) == len(styles)


def test_missing_or_malformed_folder(tmp_path):
    with pytest.raises(UserInputError, match="CLEVR data folder .*does not exist"):
        CLEVRDataModule(data_dir=str(tmp_path / "missing"))
    dm = CLEVRDataModule(data_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="no attributes.json"):
        dm.setup()
    (tmp_path / "attributes.json").write_text(
        json.dumps([{"file": "a.png", "shape": "cube", "material": "metal", "color": "pink", "size": "large"}])
    )
    with pytest.raises(UserInputError, match="unknown CLEVR color 'pink'"):
        dm.setup()


@pytest.mark.parametrize("material", MATERIALS)
def test_config_instantiates(material, preset_cli):
    from nemo_train.models import ClassifierModule

    cli = preset_cli(f"clevr/{material}.yaml")
    assert isinstance(cli.datamodule, CLEVRDataModule) and cli.datamodule.bias.favoured_material == material
    assert isinstance(cli.model, ClassifierModule) and cli.model.hparams.backbone == "bias_cnn"
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes == 3


@pytest.mark.slow
@pytest.mark.parametrize("material", MATERIALS)
def test_trained_cnn_shows_the_planted_material_bias(material, tmp_path):
    """The shipped config's bias, on a smaller run: favoured material >= 0.9, the other at least 0.3 lower."""
    from pathlib import Path

    import lightning as L
    import yaml

    from nemo_train.models import ClassifierModule

    config = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "configs" / "clevr" / f"{material}.yaml").read_text()
    )
    data_args = {**config["data"]["init_args"], "test_styles": 2}
    L.seed_everything(TRAINING_SEED, verbose=False)
    dm = CLEVRDataModule(**data_args)
    module = ClassifierModule(**config["model"]["init_args"], num_classes=dm.num_classes)  # linked by the CLI
    trainer = L.Trainer(
        max_epochs=config["trainer"]["max_epochs"],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, dm)
    metrics = trainer.test(module, dm, verbose=False)[0]
    aligned, conflicting = metrics["test/acc_aligned"], metrics["test/acc_conflicting"]
    assert metrics[f"test/acc_material_{material}"] == pytest.approx(aligned)
    assert aligned >= 0.9 and conflicting <= aligned - 0.3, metrics
