"""LightningModules for classifiers; importing this package registers ``bias_cnn`` in timm."""

from nemo_train.models.bias_cnn import BiasCNN
from nemo_train.models.classifier import ClassifierModule, create_backbone

__all__ = ["BiasCNN", "ClassifierModule", "create_backbone"]
