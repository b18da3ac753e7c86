"""Generating explanations with a fine-tuned explainer: the plain-Python API and what the ``explain`` command
(:mod:`nemo_train.explainer.explain_command`) is built from."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from PIL import UnidentifiedImageError

from datamodules.explanations import (
    ExplanationRecord,
    ImageLike,
    build_messages,
    processor_images,
    question_for,
    read_records,
    side_by_side,
    to_pil,
)
from nemo_train.artefacts import path_digest
from nemo_train.backends.student import check_adapter_folder
from nemo_train.errors import UserInputError
from nemo_train.explainer.module import ExplainerModule
from nemo_train.models.vlm import is_explainer_folder
from nemo_train.quiet import progress_bar


def load_explainer(model: str | Path | ExplainerModule, merge: bool = False) -> ExplainerModule:
    """An explainer in eval mode: a module as is, a saved adapter folder, or a base model (hub id / path, no fine-tuning)."""
    if isinstance(model, ExplainerModule):
        model.configure_model()
        return model
    if is_explainer_folder(model):
        check_adapter_folder(model, "model")
        return ExplainerModule.from_adapter(model, merge=merge)
    module = ExplainerModule(model_name_or_path=str(model))  # a fresh LoRA starts at zero: the base model's answers
    module.configure_model()
    return module.eval()


def _check_counts(what: str, values: Sequence | None, images: Sequence) -> None:
    if values is not None and len(values) != len(images):
        raise UserInputError(f"{len(values)} {what} for {len(images)} images; expected one per image")


@torch.no_grad()
def generate_explanations(
    module_or_path: str | Path | ExplainerModule,
    images: Sequence[ImageLike],
    prompts: str | Sequence[str] | None = None,
    num_samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 48,
    batch_size: int = 8,
    counterfactuals: Sequence[ImageLike | None] | None = None,
    system_prompt: str | None = None,
    top_p: float = 1.0,
    seed: int | None = None,
    progress: bool = False,
    generate_kwargs: dict[str, Any] | None = None,
) -> list[list[str]]:
    """``num_samples`` explanations per image: greedy when ``temperature == 0``, sampled otherwise.

    ``images`` are ``float[3, H, W]`` tensors in ``[0, 1]``, PIL images or paths; with ``counterfactuals``
    each image is shown with its counterfactual on the right. ``prompts`` (one, or one per image) and
    ``system_prompt`` default to what the explainer was trained with. ``seed`` makes sampling repeatable.
    Up to ``batch_size`` conversations go through one left-padded ``generate`` call, each with its own
    image list (the layout every processor accepts). ``generate_kwargs`` are passed on (e.g.
    ``synced_gpus`` under DeepSpeed ZeRO-3). Returns one list of ``num_samples`` strings per image.
    """
    if num_samples < 1:
        raise UserInputError(f"num_samples={num_samples}; expected at least 1")
    if temperature < 0:
        raise UserInputError(f"temperature={temperature}; expected 0 (greedy) or a positive value")
    if batch_size < 1:
        raise UserInputError(f"batch_size={batch_size}; expected at least 1")
    _check_counts("counterfactuals", counterfactuals, images)
    module = load_explainer(module_or_path)
    settings = module.prompting or {}
    system_prompt = system_prompt if system_prompt is not None else settings.get("system_prompt")
    if isinstance(prompts, str):
        prompts = [prompts] * len(images)
    elif prompts is not None and len(prompts) != len(images):
        raise UserInputError(f"{len(prompts)} prompts for {len(images)} images; expected one, or one per image")
    pictures, questions = [], []
    for i, image in enumerate(images):
        picture = to_pil(image)
        cf = counterfactuals[i] if counterfactuals is not None else None
        if cf is not None:
            picture = side_by_side(picture, to_pil(cf))
        pictures.append(picture)
        record = ExplanationRecord(image="", counterfactual="" if cf is not None else None)
        questions.append(
            prompts[i] if prompts is not None else question_for(record, True, None, settings.get("prompt"))
        )

    processor, model = module.processor, module.model
    tokenizer = processor.tokenizer
    sample = temperature > 0
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if sample else {"do_sample": False}
    was_training = model.training
    model.eval()
    outputs: list[list[str]] = []
    try:
        with torch.random.fork_rng(devices=[]) if seed is not None else nullcontext():
            if seed is not None:
                torch.manual_seed(seed)
            for start in progress_bar(range(0, len(pictures), batch_size), desc="explaining", disable=not progress):
                texts = [
                    processor.apply_chat_template(
                        build_messages(q, system_prompt), add_generation_prompt=True, tokenize=False
                    )
                    for q in questions[start : start + batch_size]
                ]
                bos = tokenizer.bos_token
                inputs = processor(
                    text=texts,
                    images=processor_images(pictures[start : start + batch_size]),
                    return_tensors="pt",
                    padding=True,
                    padding_side="left",
                    add_special_tokens=not (bos and texts[0].startswith(bos)),
                ).to(module.device)
                generated = model.generate(
                    **inputs,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=num_samples if sample else 1,
                    pad_token_id=tokenizer.pad_token_id,
                    **sampling,
                    **(generate_kwargs or {}),
                )
                decoded = tokenizer.batch_decode(generated[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
                decoded = [d.strip() for d in decoded]
                if sample:
                    outputs += [decoded[i : i + num_samples] for i in range(0, len(decoded), num_samples)]
                else:  # greedy: every sample is the same
                    outputs += [[d] * num_samples for d in decoded]
    finally:
        model.train(was_training)
    return outputs


@dataclass(frozen=True)
class PromptArgs:
    """What the explainer is asked.

    Args:
        counterfactual: show a pair's counterfactual beside its image: ``as_trained`` (the explainer's
            training setting; a base model without one gets it), ``show`` or ``hide``.
        prompt: override of the question the explainer was trained with.
        system_prompt: override of the context turn.
    """

    counterfactual: Literal["as_trained", "show", "hide"] = "as_trained"
    prompt: str | None = None
    system_prompt: str | None = None


@dataclass(frozen=True)
class GenerationArgs:
    """How explanations are generated.

    Args:
        num_samples: explanations per image.
        temperature: ``0`` is greedy; above, sampled with ``top_p``.
        top_p: nucleus sampling mass.
        max_new_tokens: length limit of an explanation.
        batch_size: images per ``generate`` call.

    Sampling draws from the command's ``seed`` (repeatable runs; a resumed run samples what an uninterrupted run
    samples).
    """

    num_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    batch_size: int = 8


def check_generation(g: GenerationArgs) -> None:
    """A one-line error, before the model is loaded, for generation settings out of range."""
    for name, value, low in (("num_samples", g.num_samples, 1), ("max_new_tokens", g.max_new_tokens, 1)):
        if value < low:
            raise UserInputError(f"generation.{name}={value}; expected at least {low}")
    if g.batch_size < 1:
        raise UserInputError(f"generation.batch_size={g.batch_size}; expected at least 1 image per generate call")
    if not (g.temperature >= 0 and math.isfinite(g.temperature)):
        raise UserInputError(f"generation.temperature={g.temperature}; expected 0 (greedy) or a positive value")
    if not 0 < g.top_p <= 1:
        raise UserInputError(f"generation.top_p={g.top_p}; expected a value in (0, 1]")


def check_image(path: str | Path, origin: str) -> None:
    """A one-line error naming ``origin`` and the file when ``path`` is missing, empty, not an image or cut short
    (decoded once here, before the model is loaded)."""
    if not Path(path).is_file():
        raise UserInputError(f"{origin}: image {str(path)!r} does not exist")
    if Path(path).stat().st_size == 0:
        raise UserInputError(f"{origin}: image {str(path)!r} is empty (0 bytes)")
    try:
        to_pil(path)
    except UserInputError as err:  # too many pixels: its own message
        raise UserInputError(f"{origin}: {err}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        reason = " ".join(str(err).split())[:120]
        raise UserInputError(
            f"{origin}: {str(path)!r} is not a readable image ({reason}); expected a PNG / JPEG / other image file"
        ) from None


def finite_or_none(value: Any) -> Any:
    """``value``, or ``None`` for a float that is NaN or infinite."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _records(pairs: str | None, images: list[str] | None, counterfactuals: list[str] | None) -> list[ExplanationRecord]:
    if (pairs is None) == (images is None):
        raise UserInputError("give exactly one of --pairs (a JSONL of errors) or --images (image files)")
    if pairs is not None:
        return read_records(pairs)
    _check_counts("counterfactuals", counterfactuals, images)
    return [
        ExplanationRecord(image=str(Path(p).resolve()), counterfactual=str(Path(c).resolve()) if c else None)
        for p, c in zip(images, counterfactuals or [None] * len(images))
    ]


def record_key(index: int, record: ExplanationRecord, counterfactual_shown: bool) -> str:
    """An input's key: its position and a digest of the record and of the image files it shows."""
    shown = [record.image] + ([record.counterfactual] if counterfactual_shown and record.counterfactual else [])
    content = json.dumps([record.to_json(), [path_digest(p) for p in shown]], sort_keys=True)
    return f"{index}:{hashlib.sha256(content.encode()).hexdigest()[:16]}"


def write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``path`` by ``rows`` (one JSON line each) through a temporary file and a rename."""
    scratch = path.with_name(f".{path.name}.tmp")
    with scratch.open("w") as sink:
        sink.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(scratch, path)


def generation_batches(todo: list[int], total: int, batch_size: int, sampled: bool) -> list[list[int]]:
    """The input positions of each ``generate`` call that computes the pending inputs ``todo`` (of ``total``).

    A sampled reply depends on the batch it is drawn in (one random stream per call, seeded by the batch's first
    position), so sampled inputs are generated in the batches of an uninterrupted run, positions
    ``[k * batch_size, (k + 1) * batch_size)``, whole, whichever of their inputs are done: a run killed between two
    records of a batch resumes to the replies an uninterrupted run writes. Greedy replies do not depend on the
    batch: the pending inputs are batched together.
    """
    if not sampled:
        return [todo[start : start + batch_size] for start in range(0, len(todo), batch_size)]
    starts = dict.fromkeys(i - i % batch_size for i in todo)
    return [list(range(start, min(start + batch_size, total))) for start in starts]


#: The explanations ``explain`` writes under its ``out_dir``.
EXPLANATIONS_FILE = "explanations.jsonl"
