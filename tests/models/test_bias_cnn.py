import pytest
import timm
import torch

import nemo_train.models  # noqa: F401  (registers bias_cnn)
from nemo_train.errors import UserInputError


def test_bias_cnn_is_a_timm_model_with_the_paper_layout():
    model = timm.create_model("bias_cnn", num_classes=7)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 4 and all(c.kernel_size == (7, 7) for c in convs)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 4
    x = torch.rand(2, 3, 28, 28)
    features = model.forward_features(x)
    assert model.forward_head(features, pre_logits=True).shape == (2, model.num_features)
    assert model(x).shape == (2, 7)
    model.reset_classifier(3)
    assert model(x).shape == (2, 3)


def test_bias_cnn_has_no_pretrained_weights():
    with pytest.raises(UserInputError, match="no pretrained weights"):
        timm.create_model("bias_cnn", pretrained=True)
