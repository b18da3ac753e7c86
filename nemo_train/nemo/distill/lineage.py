"""Which classifiers a distilled explainer was distilled on, as far as its files tell.

A fit saves the adapter with the pair files it trained on (``training_data`` in the adapter's metadata), and the
teacher's pair records name the classifier each error came from (``provenance.classifier``). Only these records
say what the student saw: the evaluation's targets do not (the first target need not be one of them).
"""

from __future__ import annotations

from pathlib import Path

from datamodules.explanations import read_records
from nemo_train.errors import UserInputError
from nemo_train.models.vlm import read_explainer_meta


def distilled_classifiers(adapter: str | Path) -> list[str] | None:
    """The classifiers named by the provenance of the training pairs the adapter was fitted on, in the order they
    first occur; ``None`` when that is not known (no metadata, no pair file recorded or readable, or pairs that
    name no classifier, such as caption pairs)."""
    try:
        meta = read_explainer_meta(adapter)
    except UserInputError:
        return None
    train = (meta.get("training_data") or {}).get("train_jsonl")
    if not train or not Path(train).is_file():
        return None
    try:
        records = read_records(train)
    except (OSError, UserInputError):
        return None
    names = [(r.provenance or {}).get("classifier") for r in records]
    if not names or any(not isinstance(name, str) for name in names):
        return None
    return list(dict.fromkeys(names))
