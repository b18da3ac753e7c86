"""Generating explanations with a fine-tuned explainer: a plain-Python API and the ``explain`` pipeline command."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from tqdm.auto import tqdm

from datamodules.explanations import ExplanationRecord, build_messages, read_records, side_by_side, to_pil
from nemo_train.errors import UserInputError
from nemo_train.explainer.causes import (
    PAIR_PROMPT,
    SINGLE_IMAGE_PROMPT,
    format_accuracy_table,
    per_cause_accuracy,
    predicted_cause,
)
from nemo_train.explainer.module import EXPLAINER_META, ExplainerModule

ImageLike = torch.Tensor | Image.Image | str | Path


def load_explainer(model: str | Path | ExplainerModule, merge: bool = False) -> ExplainerModule:
    """An explainer in eval mode: a module as is, a saved adapter folder, or a base model (hub id / path, no fine-tuning)."""
    if isinstance(model, ExplainerModule):
        model.configure_model()
        return model
    if (Path(model) / EXPLAINER_META).is_file():
        return ExplainerModule.from_adapter(model, merge=merge)
    module = ExplainerModule(model_name_or_path=str(model))  # a fresh LoRA starts at zero: the base model's answers
    module.configure_model()
    return module.eval()


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
) -> list[list[str]]:
    """``num_samples`` explanations per image: greedy when ``temperature == 0``, sampled otherwise.

    ``images`` are ``float[3, H, W]`` tensors in ``[0, 1]``, PIL images or paths; with ``counterfactuals``
    each image is shown with its counterfactual on the right. ``prompts`` (one, or one per image) and
    ``system_prompt`` default to what the explainer was trained with. ``seed`` makes sampling repeatable.
    Returns one list of ``num_samples`` strings per image.
    """
    if num_samples < 1:
        raise UserInputError(f"num_samples={num_samples}; expected at least 1")
    if temperature < 0:
        raise UserInputError(f"temperature={temperature}; expected 0 (greedy) or a positive value")
    if batch_size < 1:
        raise UserInputError(f"batch_size={batch_size}; expected at least 1")
    if counterfactuals is not None and len(counterfactuals) != len(images):
        raise UserInputError(
            f"{len(counterfactuals)} counterfactuals for {len(images)} images; expected one per image (or None)"
        )
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
        default = settings.get("prompt") or (PAIR_PROMPT if cf is not None else SINGLE_IMAGE_PROMPT)
        questions.append(prompts[i] if prompts is not None else default)

    processor, model = module.processor, module.model
    tokenizer = processor.tokenizer
    was_training = model.training
    model.eval()
    outputs: list[list[str]] = []
    generator_state = torch.random.fork_rng(devices=[]) if seed is not None else None
    try:
        if generator_state is not None:
            generator_state.__enter__()
            torch.manual_seed(seed)
        starts = range(0, len(pictures), batch_size)
        for start in tqdm(starts, desc="explaining", disable=not progress):
            texts = [
                processor.apply_chat_template(
                    build_messages(q, system_prompt), add_generation_prompt=True, tokenize=False
                )
                for q in questions[start : start + batch_size]
            ]
            bos = tokenizer.bos_token
            inputs = processor(
                text=texts,
                images=pictures[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=not (bos and texts[0].startswith(bos)),
            ).to(module.device)
            sampling = (
                {"do_sample": True, "temperature": temperature, "top_p": top_p}
                if temperature > 0
                else {"do_sample": False}
            )
            generated = model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_samples,
                pad_token_id=tokenizer.pad_token_id,
                **sampling,
            )
            decoded = tokenizer.batch_decode(generated[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
            decoded = [d.strip() for d in decoded]
            outputs += [decoded[i : i + num_samples] for i in range(0, len(decoded), num_samples)]
    finally:
        if generator_state is not None:
            generator_state.__exit__(None, None, None)
        model.train(was_training)
    return outputs


def explain(
    model: str,
    pairs: str | None = None,
    images: list[str] | None = None,
    counterfactuals: list[str] | None = None,
    output: str = "explanations.jsonl",
    use_counterfactual: bool | None = None,
    prompt: str | None = None,
    system_prompt: str | None = None,
    num_samples: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 48,
    batch_size: int = 8,
    seed: int = 0,
) -> Path:
    """Write explanations of classifier errors (JSONL) with a fine-tuned explainer or a base MLLM.

    Args:
        model: a saved adapter folder (``<run>/adapter``), or a hub id / local folder of a base model.
        pairs: a JSONL of errors (the pair format; ``explanation`` is not needed); or give ``images``.
        images: image files to explain (instead of ``pairs``).
        counterfactuals: one counterfactual image per entry of ``images`` (optional).
        output: the JSONL written, one line per input with ``explanations`` (and ``correct`` when a
            ``cause`` is known); an interrupted run resumes after the last line written.
        use_counterfactual: show a pair's counterfactual beside its image when it has one (default: as the
            explainer was trained; a base model without training settings gets it).
        prompt, system_prompt: override the question / context the explainer was trained with.
        num_samples, temperature: explanations per image; ``temperature 0`` is greedy.
        max_new_tokens, batch_size, seed: generation settings.
    """
    if (pairs is None) == (images is None):
        raise UserInputError("give exactly one of --pairs (a JSONL of errors) or --images (image files)")
    if pairs is not None:
        records = read_records(pairs)
    else:
        if counterfactuals is not None and len(counterfactuals) != len(images):
            raise UserInputError(
                f"{len(counterfactuals)} counterfactuals for {len(images)} images; expected one per image"
            )
        records = [
            ExplanationRecord(image=str(Path(p).resolve()), counterfactual=str(Path(c).resolve()) if c else None)
            for p, c in zip(images, counterfactuals or [None] * len(images))
        ]
    for record in records:
        for path in (record.image, record.counterfactual if use_counterfactual is not False else None):
            if path is not None and not Path(path).is_file():
                raise UserInputError(f"image {path!r} does not exist")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.is_file() else []
    module = load_explainer(model)
    if use_counterfactual is None:
        use_counterfactual = bool((module.prompting or {}).get("use_counterfactual", True))
    todo = records[len(done) :]
    with out.open("a") as sink:
        for start in tqdm(range(0, len(todo), batch_size), desc="explaining", disable=not todo):
            chunk = todo[start : start + batch_size]
            texts = generate_explanations(
                module,
                [r.image for r in chunk],
                prompts=[_question(module, r, use_counterfactual, prompt) for r in chunk],
                num_samples=num_samples,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                counterfactuals=[r.counterfactual for r in chunk]
                if use_counterfactual and any(r.counterfactual for r in chunk)
                else None,
                system_prompt=system_prompt,
                seed=seed + len(done) + start,
            )
            for record, samples in zip(chunk, texts):
                row: dict[str, Any] = {**record.to_json(), "explanations": samples}
                if record.cause:
                    row["correct"] = [predicted_cause(s, _candidates(record.cause)) == record.cause for s in samples]
                sink.write(json.dumps(row) + "\n")
                done.append(row)
            sink.flush()
    scored = [r for r in done if "cause" in r]
    if scored:
        table = per_cause_accuracy(
            [r["cause"] for r in scored], [r["explanations"][0] for r in scored], _cause_columns(scored)
        )
        print(format_accuracy_table({"explainer": table}))
    print(f"wrote {len(done)} explanations to {out}")
    return out


def _question(module: ExplainerModule, record: ExplanationRecord, use_counterfactual: bool, prompt: str | None) -> str:
    with_cf = use_counterfactual and record.counterfactual is not None
    trained = (module.prompting or {}).get("prompt")
    return prompt or record.prompt or trained or (PAIR_PROMPT if with_cf else SINGLE_IMAGE_PROMPT)


def _candidates(cause: str) -> tuple[str, ...]:
    from datamodules.six_causes import CAUSES

    return CAUSES if cause in CAUSES else (*CAUSES, cause)


def _cause_columns(rows: list[dict]) -> tuple[str, ...]:
    from datamodules.six_causes import CAUSES

    extra = sorted({r["cause"] for r in rows} - set(CAUSES))
    return (*CAUSES, *extra)
