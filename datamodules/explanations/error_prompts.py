"""Errors to explain, as the explainer is asked about them: the data of its reinforcement stage.

Each item is one error of a distillation teacher's pair file (``nemo-train distill-teacher`` writes
``pairs/{train,val}.jsonl``): the picture the explainer sees (the error image, with the record's second image beside
it where there is one, e.g. the evidence view's montage of references), the question it is asked (the record's own
prompt, which carries the classifier's readings of the references), and ``error``: what a reward needs to find the
error again (the classifier that made it and its id, from the record's provenance; its classes and cause). The
teacher's answer is not used: the explainer is rewarded for its own answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Dataset

from datamodules.explanations.encoding import question_for, record_image
from datamodules.explanations.records import ExplanationRecord, read_records
from nemo_train.errors import UserInputError


def error_of(record: ExplanationRecord) -> dict[str, Any]:
    """What identifies the error of ``record``: classifier, sample id, classes, cause, view and image path."""
    provenance = record.provenance or {}
    if not provenance.get("classifier") or not provenance.get("sample_id"):
        raise UserInputError(
            f"{record.origin or record.image}: no provenance classifier / sample_id; expected a pair written by "
            "nemo-train distill-teacher"
        )
    return {
        "classifier": str(provenance["classifier"]),
        "sample_id": str(provenance["sample_id"]),
        "view": provenance.get("view"),
        "label": record.label,
        "prediction": record.prediction,
        "cause": record.cause,
        "image": record.image,
    }


class ErrorPromptsDataset(Dataset):
    """One item per record: ``{"picture": PIL image, "prompt": str, "system": str | None, "error": dict}``.

    Pictures are read when an item is taken (a missing or unreadable image is a one-line error naming the record).
    """

    def __init__(
        self,
        records: Sequence[ExplanationRecord],
        use_counterfactual: bool = True,
        system_prompt: str | None = None,
        prompt: str | None = None,
        source: str = "pairs",
    ) -> None:
        if not records:
            raise UserInputError(f"no error in {source}; expected a JSONL of a teacher's pairs")
        self.records = list(records)
        self.errors = [error_of(r) for r in self.records]
        self.use_counterfactual, self.system_prompt, self.prompt = use_counterfactual, system_prompt, prompt

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        try:
            picture = record_image(record, self.use_counterfactual)
        except (OSError, ValueError) as err:
            raise UserInputError(f"{record.origin or record.image}: cannot read its image ({err})") from None
        return {
            "picture": picture,
            "prompt": question_for(record, self.use_counterfactual, self.prompt),
            "system": record.system or self.system_prompt,
            "error": dict(self.errors[index]),
        }


def collate_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch is the list of its items (pictures stay PIL images for the processor)."""
    return list(items)


class ErrorPromptsDataModule(L.LightningDataModule):
    """Errors of a teacher's pair files, asked as the distilled explainer was asked (for ``GRPOModule``).

    Args:
        train_jsonl: the errors trained on (a teacher's ``pairs/train.jsonl``).
        val_jsonl: held-out errors scored during training (a teacher's ``pairs/val.jsonl``), optional.
        use_counterfactual: show a record's second image beside the error (the evidence view's references), as
            the distilled explainer was trained.
        system_prompt, prompt: overrides of the context turn and the question (default: each record's own).
        batch_size: errors per step (each is answered ``group_size`` times by the module).
        max_errors: use only the first this many errors of each file (``None``: all).
        shuffle: draw the training errors in a seeded random order (else in file order).
        num_workers: data loader processes.
    """

    def __init__(
        self,
        train_jsonl: str,
        val_jsonl: str | None = None,
        use_counterfactual: bool = True,
        system_prompt: str | None = None,
        prompt: str | None = None,
        batch_size: int = 4,
        max_errors: int | None = None,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1 or (max_errors is not None and max_errors < 1):
            raise UserInputError(f"batch_size={batch_size}, max_errors={max_errors}; expected at least 1 each")
        self.save_hyperparameters()
        self.train_set: ErrorPromptsDataset | None = None
        self.val_set: ErrorPromptsDataset | None = None

    def prompt_settings(self) -> dict[str, Any]:
        """What generation needs to ask the same question (recorded with the adapter)."""
        hp = self.hparams
        return {"use_counterfactual": hp.use_counterfactual, "system_prompt": hp.system_prompt, "prompt": hp.prompt}

    def _dataset(self, path: str) -> ErrorPromptsDataset:
        hp = self.hparams
        records = read_records(Path(path))[: hp.max_errors]
        return ErrorPromptsDataset(records, hp.use_counterfactual, hp.system_prompt, hp.prompt, source=str(path))

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set = self._dataset(self.hparams.train_jsonl)
            if self.hparams.val_jsonl is not None:
                self.val_set = self._dataset(self.hparams.val_jsonl)

    def _loader(self, dataset: ErrorPromptsDataset, shuffle: bool) -> DataLoader:
        hp = self.hparams
        return DataLoader(
            dataset, batch_size=hp.batch_size, shuffle=shuffle, collate_fn=collate_items, num_workers=hp.num_workers
        )

    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        return self._loader(self.train_set, shuffle=self.hparams.shuffle)

    def val_dataloader(self) -> DataLoader | list:
        self.setup("fit")
        return self._loader(self.val_set, shuffle=False) if self.val_set is not None else []
