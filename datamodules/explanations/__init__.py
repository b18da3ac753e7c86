"""Image-explanation pairs for fine-tuning a multimodal LLM explainer.

One job per module: :mod:`.records` (the pair type, JSONL reading and writing), :mod:`.images` (loading
with a pixel limit, the side-by-side pair picture), :mod:`.encoding` (chat messages, the question asked,
label-masked encoding, batching), :mod:`.datamodule` (the dataset and ``ExplanationDataModule``) and
:mod:`.builders` (the embedded six-cause pairs and the CMNIST bias-error pairs).
"""

from datamodules.explanations.builders import build_cmnist_bias_pairs, build_six_cause_pairs
from datamodules.explanations.datamodule import ExplanationDataModule, ExplanationPairsDataset, auto_processor
from datamodules.explanations.encoding import (
    IGNORE_INDEX,
    TOKEN_KEYS,
    ConversationEncoder,
    ConversationTooLong,
    ExplanationCollator,
    build_messages,
    collate_encoded,
    processor_images,
    question_for,
    record_image,
)
from datamodules.explanations.images import MAX_IMAGE_PIXELS, ImageLike, open_rgb, side_by_side, to_pil
from datamodules.explanations.records import RECORD_KEYS, ExplanationRecord, read_records, write_records

__all__ = [
    "IGNORE_INDEX",
    "MAX_IMAGE_PIXELS",
    "RECORD_KEYS",
    "TOKEN_KEYS",
    "ConversationEncoder",
    "ConversationTooLong",
    "ExplanationCollator",
    "ExplanationDataModule",
    "ExplanationPairsDataset",
    "ExplanationRecord",
    "ImageLike",
    "auto_processor",
    "build_cmnist_bias_pairs",
    "build_messages",
    "build_six_cause_pairs",
    "collate_encoded",
    "open_rgb",
    "processor_images",
    "question_for",
    "read_records",
    "record_image",
    "side_by_side",
    "to_pil",
    "write_records",
]
