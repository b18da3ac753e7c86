"""MLLM explainer of classifier errors: pairs, LoRA / QLoRA fine-tuning, generation (paper 004, Sec. 4)."""

from nemo_train.explainer.module import LANGUAGE_TARGETS, VISION_LANGUAGE_TARGETS, ExplainerModule
from nemo_train.explainer.tiny import TINY_MODEL

__all__ = ["ExplainerModule", "LANGUAGE_TARGETS", "VISION_LANGUAGE_TARGETS", "TINY_MODEL"]
