"""Error mining for distillation: the mining split shares no image with the evaluation errors."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.targets import ClassifierTarget  # noqa: E402
from nemo_train.nemo.distill.mining import check_disjoint_files, mine_synthetic_errors  # noqa: E402
from nemo_train.scoring.benchmark import build_cmnist_benchmark, build_synthetic_benchmark  # noqa: E402


@pytest.fixture(scope="module")
def cmnist_target(trained_cmnist_classifier):
    module, datamodule = trained_cmnist_classifier
    return ClassifierTarget(module, datamodule.class_names)


def _image_set(images: torch.Tensor) -> set[bytes]:
    return {im.mul(255).round().to(torch.uint8).numpy().tobytes() for im in images}


def test_cmnist_mining_errors_are_disjoint_from_evaluation(cmnist_target):
    mined = mine_synthetic_errors("cmnist", cmnist_target, n=2000, seed=1, styles=1)
    evaluation = build_cmnist_benchmark(target=cmnist_target, n=2000, seed=0, test_styles=2)
    assert mined.errors and evaluation.errors
    assert all(e.sample_id.startswith("mine-") for e in mined.errors)
    # no pixel-identical image between mined errors (and their references) and evaluation errors / references
    mined_images = _image_set(torch.stack([e.image for e in mined.errors]))
    mined_images |= _image_set(mined.reference.images.float() / 255)
    evaluation_images = _image_set(torch.stack([e.image for e in evaluation.errors]))
    evaluation_images |= _image_set(evaluation.reference.images.float() / 255)
    assert not mined_images & evaluation_images
    # mined errors come from the training handwriting pool, evaluation errors from the test pool
    from datamodules.cmnist import POOLS, STYLE_BITS

    assert {e.attrs["style"] >> STYLE_BITS for e in mined.errors} == {POOLS.index("train")}
    assert {e.attrs["style"] >> STYLE_BITS for e in evaluation.errors} == {POOLS.index("test")}
    # mined errors are real bias-conflicting errors, re-rendered exactly by the mining renderer
    for error in mined.errors[:20]:
        assert cmnist_target.predict(error.image[None]).item() == error.prediction != error.label
        a = error.attrs
        again = mined.renderer.render(a["digit"], a["color"], a["angle"], a["style"])
        assert torch.equal(again.clamp(0, 1).mul(255).round().div(255), error.image)


def test_clevr_mining_views_are_disjoint_from_test_views():
    from nemo_train.models.targets import Target

    class MetalIsCylinder(Target):  # predicts class 2 (cylinder) for everything: errors on cubes and spheres
        class_names = ["cube", "sphere", "cylinder"]

        def __init__(self) -> None:
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def logits(self, images):
            return torch.tensor([0.0, 0.0, 1.0]).expand(len(images), 3)

        def features(self, images):
            return images.mean((2, 3))

    target = MetalIsCylinder()
    kwargs = {"image_size": 16}
    mined = mine_synthetic_errors("clevr", target, n=500, styles=1, datamodule_kwargs=kwargs)
    evaluation = build_synthetic_benchmark("clevr", target=target, n=500, test_styles=1, datamodule_kwargs=kwargs)
    mined_styles = {e.attrs["style"] for e in mined.errors}
    evaluation_styles = {e.attrs["style"] for e in evaluation.errors}
    assert not mined_styles & evaluation_styles
    assert not _image_set(torch.stack([e.image for e in mined.errors])) & _image_set(
        torch.stack([e.image for e in evaluation.errors])
    )


def test_folder_mining_refuses_a_split_sharing_an_image(tmp_path):
    from PIL import Image

    for root, colours in (("mine", [(255, 0, 0), (0, 255, 0)]), ("eval", [(0, 0, 255), (0, 255, 0)])):
        for k, colour in enumerate(colours):
            folder = tmp_path / root / f"class{k}"
            folder.mkdir(parents=True)
            Image.new("RGB", (8, 8), colour).save(folder / "a.png")
    with pytest.raises(UserInputError, match="also in the evaluation folder"):
        check_disjoint_files(tmp_path / "mine", tmp_path / "eval")
    (tmp_path / "mine" / "class1" / "a.png").unlink()
    Image.new("RGB", (8, 8), (9, 9, 9)).save(tmp_path / "mine" / "class1" / "b.png")
    check_disjoint_files(tmp_path / "mine", tmp_path / "eval")
    with pytest.raises(UserInputError, match="is the evaluation folder"):
        check_disjoint_files(tmp_path / "eval", tmp_path / "eval")
