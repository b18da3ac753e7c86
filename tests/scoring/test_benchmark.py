"""Benchmark builders: CMNIST bias-conflicting errors and image-folder datasets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.targets import ClassifierTarget, Target  # noqa: E402
from nemo_train.scoring.benchmark import build_cmnist_benchmark  # noqa: E402
from nemo_train.scoring.folder_benchmark import build_folder_benchmark  # noqa: E402
from nemo_train.scoring.interventions import ExactAttributeEditor  # noqa: E402


@pytest.fixture(scope="module")
def cmnist_target(trained_cmnist_classifier):
    module, datamodule = trained_cmnist_classifier
    return ClassifierTarget(module, datamodule.class_names)


def test_cmnist_benchmark_holds_bias_conflicting_errors(cmnist_target):
    bench = build_cmnist_benchmark(target=cmnist_target, n=25, seed=0, test_styles=1)
    from datamodules.cmnist import BiasSpec

    allowed = BiasSpec.parse("model_a").allowed_matrix()
    assert 0 < len(bench.errors) <= 25
    images = torch.stack([e.image for e in bench.errors])
    predictions = cmnist_target.predict(images)
    for error, pred in zip(bench.errors, predictions.tolist()):
        assert error.prediction == pred != error.label  # really misclassified
        assert not allowed[error.attrs["digit"], error.attrs["color"]]  # bias-conflicting
        assert error.label == error.attrs["digit"]
    # the whole test grid is split between errors and reference database
    assert len(bench.reference) + len(bench.errors) == 10 * 10 * 13
    for attrs, caption in list(zip(bench.reference.attrs, bench.reference.captions))[::97]:  # written out by hand
        pose = "upright" if attrs["angle"] == 0 else f"rotated {attrs['angle']} degrees"
        assert caption == f"a {bench.vocabulary['color'][attrs['color']]} digit {attrs['digit']}, {pose}"
    assert torch.allclose(bench.reference.features.norm(dim=-1), torch.ones(len(bench.reference)), atol=1e-5)
    assert bench.cause["values"][3] == ["red"] and bench.criterion == "cmnist"
    # a no-op exact edit reproduces the stored image bit for bit (the renderer is the test renderer)
    error = bench.errors[0]
    same = ExactAttributeEditor(bench.renderer).edit(error, [{"attribute": "angle", "value": error.attrs["angle"]}])
    assert torch.equal(same[0], error.image)


def test_cmnist_benchmark_sampling_is_seeded(cmnist_target):
    def ids(seed):
        return [e.sample_id for e in build_cmnist_benchmark(target=cmnist_target, n=5, seed=seed, test_styles=1).errors]

    assert ids(1) == ids(1)
    assert ids(1) != ids(2)


def test_cmnist_benchmark_bad_input(cmnist_target):
    with pytest.raises(UserInputError, match="n=0"):
        build_cmnist_benchmark(target=cmnist_target, n=0)
    with pytest.raises(UserInputError, match="checkpoint"):
        build_cmnist_benchmark()


class BrightnessTarget(Target):
    """Toy 2-class target: class 1 iff the mean red channel exceeds 0.5."""

    def __init__(self) -> None:
        super().__init__()
        self.class_names = ["dark", "red"]
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def logits(self, images):
        red = images[:, 0].mean((1, 2))
        return torch.stack([0.5 - red, red - 0.5], -1) * 10

    def features(self, images):
        return images.mean((2, 3))


def _write(path, rgb):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 20), rgb).save(path)


def test_folder_benchmark_keeps_misclassified_and_builds_reference(tmp_path):
    root, extra = tmp_path / "data", tmp_path / "imagenet_subset"
    for i in range(4):
        _write(root / "dark" / f"ok{i}.png", (10, 10, 10))
        _write(root / "red" / f"ok{i}.png", (250, 0, 0))
    for i in range(3):
        _write(root / "dark" / f"bad{i}.png", (250, 10, 10))  # dark labelled, predicted red
    _write(extra / "red" / "ref.png", (240, 0, 0))
    bench = build_folder_benchmark(
        "toyset", root, BrightnessTarget(), "imagenet_d", n=2, seed=0, extra_reference=extra, image_size=16
    )
    assert len(bench.errors) == 2
    assert all(e.label == 0 and e.prediction == 1 and "bad" in e.path for e in bench.errors)
    assert bench.errors[0].image.shape == (3, 16, 16)
    assert len(bench.reference) == 11 - 2 + 1  # the rest plus the extra reference image
    assert bench.reference.correct.sum() == 4 + 4 + 1
    assert bench.reference.image(len(bench.reference) - 1).shape == (3, 16, 16)
    with pytest.raises(UserInputError, match="does not exist"):
        build_folder_benchmark("x", tmp_path / "nope", BrightnessTarget(), "imagenet_d")
    with pytest.raises(UserInputError, match="classes"):
        _write(tmp_path / "three" / "c" / "a.png", (0, 0, 0))
        _write(tmp_path / "three" / "a" / "a.png", (0, 0, 0))
        _write(tmp_path / "three" / "b" / "a.png", (0, 0, 0))
        build_folder_benchmark("x", tmp_path / "three", BrightnessTarget(), "imagenet_d")


def test_clevr_benchmark_and_exact_material_edit():
    from nemo_train.models import ClassifierModule
    from nemo_train.scoring.benchmark import build_synthetic_benchmark

    torch.manual_seed(0)
    target = ClassifierTarget(ClassifierModule(backbone="bias_cnn", num_classes=3), ["cube", "cylinder", "sphere"])
    bench = build_synthetic_benchmark(
        "clevr", target=target, n=4, seed=0, test_styles=1, datamodule_kwargs={"image_size": 32}
    )
    assert (
        bench.criterion == "clevr" and bench.cause["attribute"] == "material" and bench.cause["values"][0] == ["rubber"]
    )
    assert len(bench.errors) + len(bench.reference) == 144
    error = bench.errors[0]
    assert error.attrs["material"] == 0 and error.prediction != error.label  # metal (conflicting) and wrong
    assert bench.reference.captions[0].startswith("a ") and bench.reference.captions[0].split()[-1] in bench.class_names
    edited = ExactAttributeEditor(bench.renderer).edit(
        error, [{"attribute": "material", "value": 1}, {"attribute": "size", "value": error.attrs["size"]}]
    )
    assert torch.equal(edited[1], error.image) and not torch.equal(edited[0], error.image)
    with pytest.raises(UserInputError, match="generated dataset"):
        build_synthetic_benchmark("mnist", target=target)


def test_a_folder_may_carry_each_image_s_own_cause(tmp_path):
    root = tmp_path / "data"
    for i in range(3):
        _write(root / "red" / f"ok{i}.png", (250, 0, 0))
        _write(root / "dark" / f"bad{i}.png", (250, 10, 10))
    (root / "causes.csv").write_text("image,cause\ndark/bad0.png,background\ndark/bad1.png,texture\n")
    bench = build_folder_benchmark("toyset", root, BrightnessTarget(), "imagenet_d", n=3, image_size=16)
    causes = {Path(e.path).name: e.cause for e in bench.errors}
    assert causes == {"bad0.png": "background", "bad1.png": "texture", "bad2.png": None}
    assert bench.criterion == "imagenet_d"  # the paper-level factor stays
    (root / "causes.csv").write_text("file,why\nx,y\n")
    with pytest.raises(UserInputError, match="columns image and cause"):
        build_folder_benchmark("toyset", root, BrightnessTarget(), "imagenet_d", n=3, image_size=16)
