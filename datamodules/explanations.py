"""Image-explanation pairs for fine-tuning a multimodal LLM explainer (paper 004, Sec. 4 and App. C).

JSONL format, one pair per line (paths relative to the JSONL file's folder, or absolute)::

    {"image": "images/000123.png",            # required: the image the classifier failed on
     "counterfactual": "images/000123_cf.png", # optional: a similar image it is confident on
     "explanation": "The image is pixelated.", # required for training: the assistant's answer
     "prompt": "...", "system": "...",         # optional: overrides of the question / the context
     "cause": "pixelation",                    # optional: ground-truth cause (scored by the callback)
     "label": 3, "prediction": 5,              # optional: true class and the classifier's prediction
     "cei": 87.5, "provenance": {...}}         # optional: a teacher's CEI and where the pair came from

When a counterfactual is used, the two images are shown side by side in one picture, the original on the
left (as in 004 Sec. 4), so any model that takes one image per turn can read it.

:class:`ConversationEncoder` renders each pair with the model's own processor and chat template, and
labels exactly the assistant's answer and its end-of-turn token (everything else is ``-100``). A pair
that does not fit ``max_length`` is dropped, never truncated (truncation could cut into the image
tokens). Pairs with a missing or unreadable image, or an empty explanation, are dropped too; each drop is
counted and reported in one warning. :class:`ExplanationDataModule` batches encoded pairs with padding,
and, given no JSONL, builds the embedded six-cause pairs from CMNIST with :func:`build_six_cause_pairs`.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from nemo_train.errors import UserInputError

#: Batch keys aligned with the token sequence (padded along dim 1); every other tensor is concatenated.
TOKEN_KEYS = ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "token_type_ids", "cross_attention_mask")
IGNORE_INDEX = -100


@dataclass
class ExplanationRecord:
    """One image-explanation pair; ``image`` / ``counterfactual`` are absolute paths once read."""

    image: str
    explanation: str | None = None
    counterfactual: str | None = None
    prompt: str | None = None
    system: str | None = None
    cause: str | None = None
    label: int | None = None
    prediction: int | None = None
    cei: float | None = None  # CEI of the explanation (a distillation teacher's pairs)
    provenance: dict[str, Any] | None = None  # who wrote the explanation, from which error

    def to_json(self, root: Path | None = None) -> dict[str, Any]:
        """The JSONL object, with image paths relative to ``root`` when given; ``None`` fields omitted."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if root is not None:
            for key in ("image", "counterfactual"):
                if key in out:
                    out[key] = str(Path(out[key]).relative_to(root))
        return out


def read_records(path: str | Path) -> list[ExplanationRecord]:
    """Read a JSONL of pairs; image paths are resolved against the file's folder.

    Raises :class:`UserInputError` for a missing file, a line that is not a JSON object, an ``image`` that
    is not a string or an unknown key. Missing images and empty explanations are left to the encoder,
    which skips and counts them.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"pairs file {str(path)!r} does not exist; expected a JSONL of image-explanation pairs")
    fields = set(ExplanationRecord.__dataclass_fields__)
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserInputError(
                f"{path}:{number} is not valid JSON ({err.msg}); expected one JSON object per line"
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("image"), str):
            raise UserInputError(
                f'{path}:{number} has no \'image\' path string; expected an object like {{"image": "a.png", ...}}'
            )
        unknown = set(obj) - fields
        if unknown:
            raise UserInputError(f"{path}:{number} has unknown key(s) {sorted(unknown)}; known keys: {sorted(fields)}")
        for key in ("image", "counterfactual"):
            if obj.get(key) is not None:
                obj[key] = str((path.parent / obj[key]).resolve())
        records.append(ExplanationRecord(**obj))
    return records


def write_records(records: Iterable[ExplanationRecord], path: str | Path) -> Path:
    """Write pairs as JSONL, image paths relative to the file's folder (they must lie under it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = path.parent.resolve()
    lines = [json.dumps(r.to_json(root)) for r in records]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


def to_pil(image: torch.Tensor | Image.Image | str | Path) -> Image.Image:
    """An RGB PIL image from a ``float[3, H, W]`` tensor in ``[0, 1]``, a PIL image or a file path."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, (str, Path)):
        with Image.open(image) as img:
            return img.convert("RGB")
    if isinstance(image, torch.Tensor) and image.ndim == 3 and image.shape[0] == 3 and image.is_floating_point():
        array = (image.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        return Image.fromarray(array, mode="RGB")
    shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
    raise UserInputError(f"cannot use {shape} as an image; expected float[3, H, W] in [0, 1], a PIL image or a path")


def side_by_side(left: Image.Image, right: Image.Image) -> Image.Image:
    """``left`` and ``right`` in one picture (heights matched to the taller, black padding)."""
    height = max(left.height, right.height)
    canvas = Image.new("RGB", (left.width + right.width, height))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width, 0))
    return canvas


def build_messages(prompt: str, system: str | None = None, explanation: str | None = None) -> list[dict]:
    """Chat messages in the processor format: optional system turn, user turn (image then text), answer."""
    messages = []
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]})
    if explanation is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": explanation}]})
    return messages


class ConversationTooLong(ValueError):
    """A conversation has more tokens than the limit (it is dropped, never truncated)."""


class ConversationEncoder:
    """Turns (image, prompt, answer) into model inputs with labels on the answer tokens only.

    The prompt is rendered with the processor's chat template and ``add_generation_prompt=True``; the
    full conversation must extend it (true of the Qwen2-VL, Llama-3.2-Vision and Idefics3 templates).
    Labels keep the answer and the first end-of-turn token after it (``end_token``, default the
    tokenizer's EOS), so the model learns to stop; everything else is ``-100``.
    """

    def __init__(self, processor: Any, max_length: int = 512, end_token: str | None = None) -> None:
        if max_length < 8:
            raise UserInputError(f"max_length={max_length} is too small; expected at least 8 tokens")
        self.processor, self.max_length = processor, max_length
        tokenizer = processor.tokenizer
        self.end_token = end_token or tokenizer.eos_token
        self.end_id = tokenizer.convert_tokens_to_ids(self.end_token)
        if self.end_id is None or self.end_id == tokenizer.unk_token_id:
            raise UserInputError(f"end_token={self.end_token!r} is not a token of this tokenizer")

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.processor.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)

    def _call_processor(self, text: str, image: Image.Image) -> dict[str, torch.Tensor]:
        bos = self.processor.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))  # the template already wrote the BOS
        return dict(self.processor(text=[text], images=[image], return_tensors="pt", add_special_tokens=add_special))

    def prompt_inputs(self, image: Image.Image, prompt: str, system: str | None = None) -> dict[str, torch.Tensor]:
        """Inputs for generation (batch of one): the conversation up to the assistant header."""
        return self._call_processor(self._render(build_messages(prompt, system), True), image)

    def encode(
        self, image: Image.Image, prompt: str, explanation: str, system: str | None = None
    ) -> dict[str, torch.Tensor]:
        """Inputs with ``labels`` (batch of one). Raises :class:`ConversationTooLong` past ``max_length``."""
        prompt_text = self._render(build_messages(prompt, system), True)
        full_text = self._render(build_messages(prompt, system, explanation), False)
        if not full_text.startswith(prompt_text):
            raise UserInputError(
                "the processor's chat template does not extend the generation prompt with the answer; cannot mask labels"
            )
        inputs = self._call_processor(full_text, image)
        ids = inputs["input_ids"][0]
        if len(ids) > self.max_length:
            raise ConversationTooLong(f"{len(ids)} tokens > max_length={self.max_length}")
        answer_ids = self.processor.tokenizer(full_text[len(prompt_text) :], add_special_tokens=False)["input_ids"]
        start = len(ids) - len(answer_ids)
        if ids[start:].tolist() != list(answer_ids):  # tokens merged across the boundary: tokenize the prompt
            start = self._call_processor(prompt_text, image)["input_ids"].shape[1]
        labels = torch.full_like(ids, IGNORE_INDEX)
        ends = (ids[start:] == self.end_id).nonzero().flatten()
        stop = start + int(ends[0]) + 1 if len(ends) else len(ids)
        labels[start:stop] = ids[start:stop]
        inputs["labels"] = labels[None]
        return inputs


def collate_encoded(samples: Sequence[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad token-aligned tensors to the longest sample and concatenate the rest along dim 0."""
    length = max(s["input_ids"].shape[1] for s in samples)
    batch: dict[str, torch.Tensor] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if key in TOKEN_KEYS:
            fill = pad_token_id if key == "input_ids" else IGNORE_INDEX if key == "labels" else 0
            padded = []
            for v in values:
                pad = torch.full((v.shape[0], length - v.shape[1], *v.shape[2:]), fill, dtype=v.dtype)
                padded.append(torch.cat([v, pad], dim=1))
            batch[key] = torch.cat(padded)
        else:
            batch[key] = torch.cat(values)
    return batch


class ExplanationCollator:
    """DataLoader ``collate_fn`` for encoded pairs (picklable, for worker processes and DDP spawn)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return collate_encoded(samples, self.pad_token_id)


def default_prompt(record: ExplanationRecord, use_counterfactual: bool) -> str:
    """The question for a record: its own ``prompt``, else the pair or single-image question."""
    from nemo_train.explainer.causes import PAIR_PROMPT, SINGLE_IMAGE_PROMPT

    if record.prompt:
        return record.prompt
    return PAIR_PROMPT if use_counterfactual and record.counterfactual else SINGLE_IMAGE_PROMPT


def record_image(record: ExplanationRecord, use_counterfactual: bool) -> Image.Image:
    """The picture shown to the model: the image, or image | counterfactual side by side."""
    image = to_pil(record.image)
    if use_counterfactual and record.counterfactual:
        image = side_by_side(image, to_pil(record.counterfactual))
    return image


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
            reason = self._add(record, encoder, use_counterfactual, system_prompt, prompt)
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
        question = prompt or default_prompt(record, use_counterfactual)
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


def load_processor(model_name_or_path: str) -> Any:
    """The model's processor (``AutoProcessor``); the embedded tiny model is built on first use."""
    from transformers import AutoProcessor

    from nemo_train.explainer.tiny import resolve_model_path

    path = resolve_model_path(model_name_or_path)
    try:
        return AutoProcessor.from_pretrained(path)
    except OSError as err:
        raise UserInputError(f"cannot load a processor from {model_name_or_path!r}: {err}") from None


class ExplanationDataModule(L.LightningDataModule):
    """Image-explanation pairs rendered with the explainer's processor, for :class:`ExplainerModule`.

    Args:
        model_name_or_path: the explainer model (hub id, local folder or ``embedded:tiny-qwen2-vl``); its
            processor and chat template render the conversations.
        train_jsonl, val_jsonl: pair files. Without ``train_jsonl`` the embedded six-cause pairs are built
            into ``data_dir`` (CMNIST images with one of six corruptions, ``per_cause`` each).
        data_dir: where the embedded pairs go.
        per_cause, seed, severity_range: size, seed and corruption strength of the embedded pairs (rebuilt
            when these change).
        use_counterfactual: show the counterfactual beside the image when a pair has one.
        system_prompt, prompt: context turn and question (default: per record, else 004-style questions).
        max_length: token limit; longer conversations are dropped with a counted warning.
        batch_size, num_workers: DataLoader settings.
    """

    def __init__(
        self,
        model_name_or_path: str = "embedded:tiny-qwen2-vl",
        train_jsonl: str | None = None,
        val_jsonl: str | None = None,
        data_dir: str = "checkpoints/explainer_tiny/pairs",
        per_cause: int = 100,
        seed: int = 0,
        severity_range: tuple[float, float] = (0.75, 1.0),
        use_counterfactual: bool = False,
        system_prompt: str | None = None,
        prompt: str | None = None,
        max_length: int = 512,
        batch_size: int = 8,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise UserInputError(f"batch_size={batch_size}; expected at least 1")
        if train_jsonl is None and val_jsonl is not None:
            raise UserInputError("val_jsonl is set without train_jsonl; give both, or neither for the embedded pairs")
        self.save_hyperparameters()
        self.processor: Any = None
        self.train_set: ExplanationPairsDataset | None = None
        self.val_set: ExplanationPairsDataset | None = None
        from datamodules.six_causes import CAUSES

        self.group_names = list(CAUSES)

    def _paths(self) -> tuple[Path, Path | None]:
        hp = self.hparams
        if hp.train_jsonl is None:
            root = Path(hp.data_dir)
            return root / "train.jsonl", root / "val.jsonl"
        return Path(hp.train_jsonl), Path(hp.val_jsonl) if hp.val_jsonl else None

    def _embedded_recipe(self) -> dict[str, Any]:
        hp = self.hparams
        return {"per_cause": hp.per_cause, "seed": hp.seed, "severity_range": list(hp.severity_range)}

    def _embedded_ready(self) -> bool:
        manifest = Path(self.hparams.data_dir) / "recipe.json"
        return manifest.is_file() and json.loads(manifest.read_text()) == self._embedded_recipe()

    def prepare_data(self) -> None:
        """Build the embedded pairs (once, on one process; again if the recipe changed) and the tiny model's cache."""
        hp = self.hparams
        if hp.train_jsonl is None and not self._embedded_ready():
            recipe = self._embedded_recipe()
            build_six_cause_pairs(
                hp.data_dir, per_cause=hp.per_cause, seed=hp.seed, severity_range=tuple(hp.severity_range)
            )
            (Path(hp.data_dir) / "recipe.json").write_text(json.dumps(recipe))
        load_processor(hp.model_name_or_path)

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
        self.processor = load_processor(hp.model_name_or_path)
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
        return DataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
            collate_fn=ExplanationCollator(self.processor.tokenizer.pad_token_id),
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.val_set, shuffle=False) if self.val_set is not None else []


# ----------------------------------------------------------------------------------------- builders


def _save_png(image: torch.Tensor, path: Path) -> str:
    to_pil(image).save(path)
    return str(path.resolve())


def _split(records: list[ExplanationRecord], val_fraction: float, seed: int) -> tuple[list, list]:
    if not 0.0 <= val_fraction < 1.0:
        raise UserInputError(f"val_fraction={val_fraction}; expected a value in [0, 1)")
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = math.ceil(val_fraction * len(records)) if val_fraction else 0
    val = sorted(order[:n_val])
    train = sorted(order[n_val:])
    return [records[i] for i in train], [records[i] for i in val]


def build_six_cause_pairs(
    out_dir: str | Path,
    per_cause: int = 100,
    seed: int = 0,
    val_fraction: float = 0.2,
    source: L.LightningDataModule | None = None,
    competency: Any = None,
    threshold: float = 0.9,
    severity_range: tuple[float, float] = (0.5, 1.0),
) -> dict[str, Path]:
    """Write six-cause pairs (004 App. C) as ``train.jsonl`` / ``val.jsonl`` under ``out_dir``.

    Corrupted images come from :class:`datamodules.six_causes.SixCausesDataModule` over ``source``
    (default: the CMNIST test grid), optionally filtered by a ``competency`` function. Each pair's
    counterfactual is the clean original (the ideal high-competency counterfactual); the explanation is
    one of the reference sentences of its cause, picked at random; ``severity_range`` is passed to
    ``apply_cause`` (see :mod:`datamodules.six_causes`). Returns ``{"train": ..., "val": ...}``.
    """
    from datamodules.cmnist import CMNISTDataModule
    from datamodules.six_causes import CAUSES, SixCausesDataModule
    from nemo_train.explainer.causes import EXPLANATIONS

    out = Path(out_dir)
    images_dir = out / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    source = source or CMNISTDataModule(train_size=10, test_styles=1, seed=seed)  # only its test grid is used
    six = SixCausesDataModule(
        source,
        competency=competency,
        threshold=threshold,
        per_cause=per_cause,
        severity_range=severity_range,
        seed=seed,
    )
    six.setup()
    gen = torch.Generator().manual_seed(seed + 1)
    records = []
    for index in range(len(six.dataset)):
        sample = six.dataset[index]
        cause = CAUSES[int(sample["group"])]
        variants = EXPLANATIONS[cause]
        records.append(
            ExplanationRecord(
                image=_save_png(sample["image"], images_dir / f"{index:06d}.png"),
                counterfactual=_save_png(sample["clean"], images_dir / f"{index:06d}_clean.png"),
                explanation=variants[int(torch.randint(len(variants), (1,), generator=gen))],
                cause=cause,
                label=int(sample["label"]),
            )
        )
    train, val = _split(records, val_fraction, seed)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}


@torch.no_grad()
def build_cmnist_bias_pairs(
    out_dir: str | Path,
    classifier: torch.nn.Module,
    datamodule: L.LightningDataModule,
    max_pairs: int | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> dict[str, Path]:
    """Write pairs for the CMNIST bias-conflicting errors of ``classifier`` (the planted colour bias is the cause).

    Every misclassified bias-conflicting test image becomes a pair whose counterfactual is the same digit
    re-rendered (same exemplar and angle) in a colour the bias allows, and whose explanation blames the
    stroke colour. Returns ``{"train": ..., "val": ...}``; raises :class:`UserInputError` if the classifier
    makes no such error.
    """
    from datamodules.cmnist import COLOR_NAMES
    from nemo_train.explainer.causes import BIAS_PROMPT, bias_explanation

    datamodule.setup("test")
    out = Path(out_dir)
    images_dir = out / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    renderer = datamodule.test_renderer
    allowed = datamodule.bias.allowed_matrix()  # [digit, colour]
    device = next(classifier.parameters()).device
    classifier.eval()
    records: list[ExplanationRecord] = []
    for batch in DataLoader(datamodule.test_set, batch_size=256):
        images = batch["image"]
        predictions = classifier(images.to(device)).argmax(-1).cpu()
        wrong = (predictions != batch["label"]) & (batch["group"] == 1)
        for i in wrong.nonzero().flatten().tolist():
            if max_pairs is not None and len(records) >= max_pairs:
                break
            attrs = {k: int(v[i]) for k, v in batch["attrs"].items()}
            digit, color = attrs["digit"], attrs["color"]
            aligned_color = int(allowed[digit].nonzero()[0])
            counterfactual = renderer.render(digit, aligned_color, attrs["angle"], attrs["style"])
            index = len(records)
            users = [d for d in range(10) if allowed[d, color]]
            records.append(
                ExplanationRecord(
                    image=_save_png(images[i], images_dir / f"{index:06d}.png"),
                    counterfactual=_save_png(counterfactual, images_dir / f"{index:06d}_cf.png"),
                    explanation=bias_explanation(COLOR_NAMES[color], digit, int(predictions[i]), users),
                    prompt=BIAS_PROMPT,
                    cause="color",
                    label=digit,
                    prediction=int(predictions[i]),
                )
            )
    if not records:
        raise UserInputError(
            "the classifier makes no bias-conflicting error on the CMNIST test grid; nothing to explain"
        )
    train, val = _split(records, val_fraction, seed)
    return {"train": write_records(train, out / "train.jsonl"), "val": write_records(val, out / "val.jsonl")}
