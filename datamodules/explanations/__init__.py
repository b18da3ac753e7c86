"""Image-explanation pairs for fine-tuning a multimodal LLM explainer.

One job per module: :mod:`.records` (the pair type, JSONL reading and writing), :mod:`.images` (loading
with a pixel limit, the side-by-side pair picture), :mod:`.encoding` (chat messages, the question asked,
label-masked encoding, batching), :mod:`.datamodule` (the dataset and ``ExplanationDataModule``) and
:mod:`.builders` (the embedded six-cause pairs and the CMNIST bias-error pairs), :mod:`.captions` (shifts caption
pairs and per-factor caption accuracy) and :mod:`.shift_pairs` (known-shift pairs in the structured answer form,
graded part by part).
"""

from datamodules.explanations.builders import build_cmnist_bias_pairs, build_six_cause_pairs
from datamodules.explanations.caption_pairs import (
    CAPTION_PROMPT,
    build_shift_caption_pairs,
    caption_accuracy,
    parse_caption,
)
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
from datamodules.explanations.shift_pairs import build_known_shift_pairs, score_answer

__all__ = [
    "CAPTION_PROMPT",
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
    "build_known_shift_pairs",
    "build_messages",
    "build_shift_caption_pairs",
    "build_six_cause_pairs",
    "caption_accuracy",
    "collate_encoded",
    "open_rgb",
    "parse_caption",
    "processor_images",
    "question_for",
    "read_records",
    "record_image",
    "score_answer",
    "side_by_side",
    "to_pil",
    "write_records",
]
