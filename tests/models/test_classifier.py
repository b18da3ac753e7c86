import pytest
import torch

from datamodules.cmnist import CMNISTDataModule
from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.trainer import quiet_trainer


def test_planted_bias_is_visible(trained_cmnist_classifier):
    """Model A of the model-differences paper: accurate on bias-aligned images, much worse on conflicting ones."""
    module, datamodule = trained_cmnist_classifier
    trainer = quiet_trainer()
    (metrics,) = trainer.test(module, datamodule, verbose=False)
    assert metrics["test/acc_aligned"] >= 0.90
    assert metrics["test/acc_conflicting"] <= metrics["test/acc_aligned"] - 0.30


def test_features_and_probabilities(trained_cmnist_classifier):
    module, datamodule = trained_cmnist_classifier
    images = torch.stack([datamodule.test_set[i]["image"] for i in range(4)])
    probs = module.predict_proba(images)
    assert probs.shape == (4, 10) and torch.allclose(probs.sum(-1), torch.ones(4))
    assert module.features(images).shape == (4, module.model.num_features)


def test_wrong_channel_count_is_a_clear_error():
    module = ClassifierModule()
    with pytest.raises(UserInputError, match=r"expected images of shape \[B, 3, H, W\]"):
        module(torch.rand(2, 1, 28, 28))


def test_unknown_backbone_and_unreachable_weights(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # fail fast instead of retrying
    with pytest.raises(UserInputError, match="unknown backbone"):
        ClassifierModule(backbone="no_such_net")
    # no network here: unreachable pretrained weights are one line, never a silent random initialisation
    with pytest.raises(UserInputError, match="cannot load the pretrained weights of 'resnet18'.*pretrained: false"):
        ClassifierModule(backbone="resnet18", pretrained=True, num_classes=6)


def test_num_classes_mismatch_is_reported():
    module = ClassifierModule(num_classes=5)
    trainer = quiet_trainer(fast_dev_run=1)
    with pytest.raises(UserInputError, match="num_classes=5"):
        trainer.fit(module, CMNISTDataModule(train_size=64))


def test_checkpoint_loads_with_weights_only(tmp_path, trained_cmnist_classifier):
    module, datamodule = trained_cmnist_classifier
    trainer = quiet_trainer()
    trainer.strategy.connect(module)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = ClassifierModule.load_from_checkpoint(path, map_location="cpu", weights_only=True).eval()
    images = torch.stack([datamodule.test_set[i]["image"] for i in range(3)])
    assert torch.allclose(loaded(images), module(images), atol=1e-6)
