"""MLLM explainer of classifier errors: LoRA / QLoRA fine-tuning, generation, sharded-training support."""

from nemo_train.explainer.module import LANGUAGE_TARGETS, VISION_LANGUAGE_TARGETS, ExplainerModule
from nemo_train.models.vlm import TINY_MODEL

__all__ = ["ExplainerModule", "LANGUAGE_TARGETS", "VISION_LANGUAGE_TARGETS", "TINY_MODEL"]
