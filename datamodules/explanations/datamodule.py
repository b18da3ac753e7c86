"""The explainer's data: encoded pairs (:class:`ExplanationPairsDataset`) and :class:`ExplanationDataModule`.

A pair that does not fit ``max_length`` is dropped, never truncated (truncation could cut into the image
tokens). Pairs with a missing or unreadable image, or an empty explanation, are dropped too; each drop is
counted and reported in one warning. An image over the pixel limit is a one-line error naming the record.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import lightning as L
import torch
from PIL import UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler
from transformers import AutoProcessor

from datamodules.explanations.builders import build_six_cause_pairs
from datamodules.explanations.caption_pairs import build_shift_caption_pairs
from datamodules.explanations.encoding import (
    ConversationEncoder,
    ConversationTooLong,
    ExplanationCollator,
    question_for,
    record_image,
)
from datamodules.explanations.records import ExplanationRecord, read_records
from datamodules.shifts import TestShift
from nemo_train.errors import UserInputError
from nemo_train.vocabulary import CAUSES

#: The pairs built into ``data_dir`` when no ``train_jsonl`` is given: the six-cause CMNIST pairs, or captions
#: of shifts digits (:func:`datamodules.explanations.caption_pairs.build_shift_caption_pairs`).
Recipe = Literal["six_causes", "shift_captions"]


def auto_processor(model_name_or_path: str) -> Any:
    """``AutoProcessor.from_pretrained`` (hub id or folder), a one-line error when it cannot load."""
    try:
        return AutoProcessor.from_pretrained(model_name_or_path)
    except OSError as err:
        hint = (
            "; the embedded model needs processor_loader: nemo_train.models.vlm.load_processor"
            if model_name_or_path.startswith("embedded:")
            else ""
        )
        raise UserInputError(f"cannot load a processor from {model_name_or_path!r}{hint}: {err}") from None


class ExplanationPairsDataset(Dataset):
    """Pairs encoded once by a :class:`ConversationEncoder`; bad pairs dropped and counted in ``skipped``."""

    def __init__(
        self,
        records: Sequence[ExplanationRecord],
        encoder: ConversationEncoder,
        use_counterfactual: bool = False,
        system_prompt: str | None = None,
        prompt: str | None = None,
        source: str = "pairs",
    ) -> None:
        self.records: list[ExplanationRecord] = []
        self.samples: list[dict[str, torch.Tensor]] = []
        self.skipped: Counter[str] = Counter()
        for record in records:
            try:
                reason = self._add(record, encoder, use_counterfactual, system_prompt, prompt)
            except UserInputError as err:
                raise UserInputError(f"{record.origin or source}: {err}") from None
            if reason:
                self.skipped[reason] += 1
        if self.skipped:
            detail = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
            warnings.warn(
                f"skipped {sum(self.skipped.values())} of {len(records)} pairs in {source}: {detail}", stacklevel=2
            )
        if not self.samples:
            raise UserInputError(f"no usable image-explanation pair in {source} ({len(records)} lines read)")

    def _add(self, record, encoder, use_counterfactual, system_prompt, prompt) -> str | None:
        if not record.explanation or not record.explanation.strip():
            return "empty explanation"
        paths = [record.image] + ([record.counterfactual] if use_counterfactual and record.counterfactual else [])
        if any(not Path(p).is_file() for p in paths):
            return "missing image"
        try:
            image = record_image(record, use_counterfactual)
        except (UnidentifiedImageError, OSError):
            return "unreadable image"
        question = question_for(record, use_counterfactual, prompt)
        try:
            sample = encoder.encode(image, question, record.explanation.strip(), record.system or system_prompt)
        except ConversationTooLong:
            return f"too long (> {encoder.max_length} tokens)"
        self.records.append(record)
        self.samples.append(sample)
        return None

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.samples[index]


class ExplanationDataModule(L.LightningDataModule):
    """Image-explanation pairs rendered with the explainer's processor, for ``ExplainerModule``.

    Args:
        model_name_or_path: the explainer model (hub id, local folder, or ``embedded:tiny-qwen2-vl`` with
            ``processor_loader: nemo_train.models.vlm.load_processor``); its processor and chat template
            render the conversations.
        processor_loader: turns ``model_name_or_path`` into a processor (default ``AutoProcessor``).
        train_jsonl, val_jsonl: pair files. Without ``train_jsonl`` the embedded pairs of ``recipe`` are
            built into ``data_dir``.
        data_dir: where the embedded pairs go (default ``<trainer.default_root_dir>/pairs``, else ``./pairs``).
        recipe: ``six_causes`` (CMNIST images with one of six corruptions, ``per_cause`` each) or
            ``shift_captions`` (``caption_pairs`` shifts digits captioned from their attributes, a
            ``shifted_share`` of them from the shift distribution, with ``caption_shift``'s number of factors off
            per image: ``single``, ``multi``, ``multi3``, ``multi4``; :data:`datamodules.shifts.TestShift`).
        per_cause, seed, severity_range, caption_pairs, shifted_share: size, seed and settings of the embedded
            pairs (rebuilt when these change).
        use_counterfactual: show the counterfactual beside the image when a pair has one.
        system_prompt, prompt: context turn and question (default: per record, else the shared questions).
        max_length: token limit; longer conversations are dropped with a counted warning.
        batch_size, num_workers: DataLoader settings.
        balance: ``cause``: draw each epoch's training pairs with replacement, every cause (the records' ``cause``)
            equally often, so that a rare cause is not learnt as rare; ``none``: each pair once, shuffled.
    """

    def __init__(
        self,
        model_name_or_path: str,
        processor_loader: Callable[[str], Any] = auto_processor,
        train_jsonl: str | None = None,
        val_jsonl: str | None = None,
        data_dir: str | None = None,
        recipe: Recipe = "six_causes",
        per_cause: int = 100,
        seed: int = 0,
        severity_range: tuple[float, float] = (0.75, 1.0),
        caption_pairs: int = 2000,
        shifted_share: float = 0.5,
        caption_shift: TestShift = "single",
        use_counterfactual: bool = False,
        system_prompt: str | None = None,
        prompt: str | None = None,
        max_length: int = 512,
        batch_size: int = 8,
        num_workers: int = 0,
        balance: Literal["none", "cause"] = "none",
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise UserInputError(f"batch_size={batch_size}; expected at least 1")
        if train_jsonl is None and val_jsonl is not None:
            raise UserInputError("val_jsonl is set without train_jsonl; give both, or neither for the embedded pairs")
        if recipe not in get_args(Recipe):
            raise UserInputError(f"recipe={recipe!r}; expected one of {list(get_args(Recipe))}")
        if caption_pairs < 2 or not 0.0 <= shifted_share <= 1.0:
            raise UserInputError(
                f"caption_pairs={caption_pairs}, shifted_share={shifted_share}; expected at least 2 pairs and a share in [0, 1]"
            )
        self.save_hyperparameters(ignore=["processor_loader"])
        self.processor_loader = processor_loader
        self.processor: Any = None
        self.train_set: ExplanationPairsDataset | None = None
        self.val_set: ExplanationPairsDataset | None = None
        self.group_names = list(CAUSES) if recipe == "six_causes" else ["caption"]

    def data_dir(self) -> Path:
        """Where the embedded pairs are built."""
        if self.hparams.data_dir is not None:
            return Path(self.hparams.data_dir)
        return Path(self.trainer.default_root_dir if self.trainer is not None else ".") / "pairs"

    def _paths(self) -> tuple[Path, Path | None]:
        hp = self.hparams
        if hp.train_jsonl is None:
            root = self.data_dir()
            return root / "train.jsonl", root / "val.jsonl"
        return Path(hp.train_jsonl), Path(hp.val_jsonl) if hp.val_jsonl else None

    def _embedded_recipe(self) -> dict[str, Any]:
        hp = self.hparams
        if hp.recipe == "shift_captions":
            found = {"recipe": hp.recipe, "size": hp.caption_pairs, "seed": hp.seed, "shifted_share": hp.shifted_share}
            return found | ({"caption_shift": hp.caption_shift} if hp.caption_shift != "single" else {})
        return {"per_cause": hp.per_cause, "seed": hp.seed, "severity_range": list(hp.severity_range)}

    def _embedded_ready(self) -> bool:
        manifest = self.data_dir() / "recipe.json"
        return manifest.is_file() and json.loads(manifest.read_text()) == self._embedded_recipe()

    def prepare_data(self) -> None:
        """Build the embedded pairs (once, on one process; again if the recipe changed) and the model's cache."""
        hp = self.hparams
        if hp.train_jsonl is None and not self._embedded_ready():
            recipe = self._embedded_recipe()
            if hp.recipe == "shift_captions":
                build_shift_caption_pairs(
                    self.data_dir(), hp.caption_pairs, hp.seed, shifted_share=hp.shifted_share, shift=hp.caption_shift
                )
            else:
                build_six_cause_pairs(
                    self.data_dir(), per_cause=hp.per_cause, seed=hp.seed, severity_range=tuple(hp.severity_range)
                )
            (self.data_dir() / "recipe.json").write_text(json.dumps(recipe))
        self.processor_loader(hp.model_name_or_path)

    def prompt_settings(self) -> dict[str, Any]:
        """What generation needs to ask the same question as training."""
        hp = self.hparams
        return {"use_counterfactual": hp.use_counterfactual, "system_prompt": hp.system_prompt, "prompt": hp.prompt}

    def setup(self, stage: str | None = None) -> None:
        """Load the processor and encode the pairs (idempotent)."""
        if self.train_set is not None:
            return
        hp = self.hparams
        if hp.train_jsonl is None and not self._embedded_ready():
            self.prepare_data()
        self.processor = self.processor_loader(hp.model_name_or_path)
        encoder = ConversationEncoder(self.processor, hp.max_length)
        train_path, val_path = self._paths()
        kwargs = dict(use_counterfactual=hp.use_counterfactual, system_prompt=hp.system_prompt, prompt=hp.prompt)
        self.train_set = ExplanationPairsDataset(read_records(train_path), encoder, source=str(train_path), **kwargs)
        if val_path is not None:
            self.val_set = ExplanationPairsDataset(read_records(val_path), encoder, source=str(val_path), **kwargs)

    @property
    def val_records(self) -> list[ExplanationRecord]:
        """The held-out pairs kept after encoding (what the accuracy callback explains)."""
        return self.val_set.records if self.val_set is not None else []

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        sampler = cause_balanced_sampler(dataset.records) if shuffle and self.hparams.balance == "cause" else None
        return DataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle and sampler is None,
            sampler=sampler,
            num_workers=self.hparams.num_workers,
            collate_fn=ExplanationCollator(self.processor.tokenizer.pad_token_id),
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.val_set, shuffle=False) if self.val_set is not None else []


def cause_balanced_sampler(records: Sequence[ExplanationRecord]) -> WeightedRandomSampler:
    """Draws ``len(records)`` pairs with replacement, each cause (``record.cause``; none counts as one cause) with
    the same total weight."""
    counts = Counter(r.cause for r in records)
    weights = torch.tensor([1.0 / counts[r.cause] for r in records], dtype=torch.double)
    return WeightedRandomSampler(weights, num_samples=len(records), replacement=True)
