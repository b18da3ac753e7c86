"""The one classifier spec type: every command names the classifier it analyses with the same objects."""

from __future__ import annotations

import pytest
import torch

from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.specs import (
    FitCheckpoint,
    TimmModel,
    ZeroShotModel,
    as_classifier,
    unique_names,
)


def test_a_plain_path_is_a_fit_checkpoint_named_by_its_experiment_folder(tmp_path):
    spec = as_classifier("checkpoints/cmnist_model_a/checkpoints/best.ckpt")
    assert isinstance(spec, FitCheckpoint) and spec.label == "cmnist_model_a"
    assert as_classifier(spec) is spec
    with pytest.raises(
        UserInputError, match=r"does not exist; train it first: `nemo-train fit --config configs/cmnist"
    ):
        spec.check()
    clash = [FitCheckpoint("a/run/checkpoints/best.ckpt"), FitCheckpoint("b/run/checkpoints/last.ckpt")]
    assert unique_names(clash) == ["run/best", "run/last"]
    with pytest.raises(UserInputError, match="named .'x'. more than once"):
        unique_names([FitCheckpoint("a.ckpt", name="x"), TimmModel("resnet18", name="x")])


def test_a_checkpoint_of_other_classes_is_one_line(tmp_path, lightning_checkpoint):
    path = lightning_checkpoint(ClassifierModule(backbone="bias_cnn", num_classes=10), tmp_path / "run" / "best.ckpt")
    target = FitCheckpoint(path).build()
    assert target.class_names == [str(i) for i in range(10)]
    images = torch.rand(2, 3, 28, 28)
    assert target.predict_proba(images).shape == (2, 10)
    with pytest.raises(UserInputError, match="has 10 classes but the data have 3") as err:
        FitCheckpoint(path).build(["a", "b", "c"])
    assert "\n" not in str(err.value)


def test_timm_model_is_the_published_model_with_its_own_head():
    target = TimmModel("resnet18", pretrained=False).build()
    assert len(target.class_names) == 1000 and target.class_names[0] == "tench"
    assert TimmModel("resnet18", pretrained=False).identity() == {"timm": "resnet18", "pretrained": False}


def test_timm_model_refuses_random_weights_offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        UserInputError, match="cannot load weights of timm model 'resnet18.a1_in1k' from the hub"
    ) as err:
        TimmModel("resnet18.a1_in1k").build()
    assert "\n" not in str(err.value)


def test_zero_shot_model_with_one_prompt_per_class(tmp_path):
    from tests.differences.tiny_hub_models import tiny_siglip

    prompts = ["a photo of a man with black hair", "a photo of a woman with blond hair"]
    spec = ZeroShotModel(str(tiny_siglip(tmp_path / "siglip")), prompts=prompts, name="A")
    target = spec.build()
    assert target.prompts == prompts and target.predict(torch.rand(3, 3, 16, 16)).shape == (3,)
    assert spec.identity()["class_prompts"] == prompts
    with pytest.raises(UserInputError, match="needs class names .* or `prompts`"):
        ZeroShotModel("google/siglip-base-patch16-224").build()


def test_counterfactuals_refuses_a_spec_without_differentiable_features(tmp_path):
    from nemo_train.competency.pipeline import counterfactuals

    with pytest.raises(UserInputError, match="counterfactuals needs a `nemo-train fit` checkpoint .* TimmModel"):
        counterfactuals(TimmModel("resnet18", pretrained=False), out_dir=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
