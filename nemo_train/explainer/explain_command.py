"""``nemo-train explain``: explanations of classifier errors (JSONL) by a fine-tuned explainer or a base MLLM."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from datamodules.explanations import question_for
from nemo_train.artefacts import source_identity
from nemo_train.backends.student import check_adapter_folder
from nemo_train.errors import UserInputError
from nemo_train.explainer.generation import (
    EXPLANATIONS_FILE,
    GenerationArgs,
    PromptArgs,
    _records,
    check_generation,
    check_image,
    finite_or_none,
    generate_explanations,
    generation_batches,
    load_explainer,
    record_key,
    write_jsonl_atomic,
)
from nemo_train.explainer.report import print_accuracy_table
from nemo_train.models.vlm import is_explainer_folder
from nemo_train.quiet import progress_bar
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.store import ResultStore, write_json_atomic
from nemo_train.vocabulary import CAUSES, cause_candidates, per_cause_accuracy, predicted_cause


def explain_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts an ``explain`` run uses (for its provenance)."""
    return ["correct: a keyword rule reads the cause an explanation names (standing in for manual grading)"]


@run_command("explain", explain_stand_ins)
def explain(
    model: str,
    pairs: str | None = None,
    images: list[str] | None = None,
    counterfactuals: list[str] | None = None,
    out_dir: OutDir = "checkpoints/explain",
    prompting: PromptArgs = PromptArgs(),
    generation: GenerationArgs = GenerationArgs(),
    wandb: bool = False,
    seed: Seed = 0,
    device: Device = "auto",
) -> Path:
    """Write explanations of classifier errors (JSONL) with a fine-tuned explainer or a base MLLM.

    Writes ``<out_dir>/explanations.jsonl``: one line per input with ``explanations`` (and ``correct`` when a
    ``cause`` is known), its ``key`` (position and digest of the input and its image files) and the ``settings``
    it was generated with (the model folder's digest, prompting, generation); a rerun keeps the lines whose key
    and settings match and computes the rest (another model's file: all of it), then leaves exactly one line per
    input, in input order. When causes are known, the per-cause accuracy table is printed and the mean is
    written to ``<out_dir>/explanations.jsonl.accuracy.json`` (``{"average": ..., "<cause>": ...}``). The
    explainer runs on ``device``.

    Args:
        model: a saved adapter folder (``<run>/adapter``), or a hub id / local folder of a base model.
        pairs: a JSONL of errors (the pair format; ``explanation`` is not needed); or give ``images``.
        images: image files to explain (instead of ``pairs``).
        counterfactuals: one counterfactual image per entry of ``images`` (optional).
        prompting: what the explainer is asked (:class:`PromptArgs`).
        generation: generation settings (:class:`GenerationArgs`).
    """
    check_generation(generation)
    if is_explainer_folder(model):  # a missing or damaged adapter file: one line before any image is read
        check_adapter_folder(model, "model")
    records = _checked_records(pairs, images, counterfactuals, prompting)
    out = Path(out_dir) / EXPLANATIONS_FILE
    if out.is_dir():
        raise UserInputError(f"{str(out)!r} is a folder; expected the explanations file (JSONL) of out_dir")
    out.parent.mkdir(parents=True, exist_ok=True)
    store = ResultStore(out)  # a torn last line is cut, unreadable lines (an older format) are recomputed
    module = load_explainer(model)
    if module.device.type != device:
        module = module.to(device)
    trained = module.prompting or {}
    show_cf = prompting.counterfactual != "hide"
    use_cf = bool(trained.get("use_counterfactual", True)) if prompting.counterfactual == "as_trained" else show_cf
    settings = {
        "model": source_identity(model) if isinstance(model, (str, Path)) else {"id": type(model).__name__},
        "prompting": asdict(prompting),
        "counterfactual_shown": use_cf,
        "generation": {k: v for k, v in asdict(generation).items() if k != "batch_size"},
        "seed": seed,
    }
    keys = [record_key(i, r, use_cf) for i, r in enumerate(records)]
    todo = [i for i, key in enumerate(keys) if store.lookup(key, settings) is None]
    pending = set(todo)
    batches = generation_batches(todo, len(records), generation.batch_size, sampled=generation.temperature > 0)
    for batch in progress_bar(batches, desc="explaining", disable=not todo):
        texts = _generate_batch(module, [records[i] for i in batch], seed + batch[0], use_cf, prompting, generation)
        for i, samples in zip(batch, texts):
            if i in pending:  # others are done; generated again only so that their batch is an uninterrupted run's
                store.append(_row(keys[i], records[i], samples), settings)
    done = [store.records[key] for key in keys]
    if not out.is_file() or out.read_bytes().count(b"\n") != len(keys):  # stale lines: keep the current ones
        write_jsonl_atomic(out, done)
    _report_accuracy(done, out)
    print(f"wrote {len(done)} explanations to {out}")
    return out


def _checked_records(pairs, images, counterfactuals, prompting: PromptArgs) -> list:
    """The inputs to explain, each image (and shown counterfactual) checked readable before any work."""
    records = _records(pairs, images, counterfactuals)
    show_cf = prompting.counterfactual != "hide"
    for record in records:
        for path in (record.image, record.counterfactual if show_cf else None):
            if path is not None:
                check_image(path, record.origin or "image")
    return records


def _generate_batch(module, chunk: list, seed: int, use_cf: bool, prompting: PromptArgs, g: GenerationArgs):
    """The sampled explanations of one batch of inputs; ``seed``: the run's seed plus the batch's first position,
    the same whichever inputs were done already."""
    trained = module.prompting or {}
    try:
        return generate_explanations(
            module,
            [r.image for r in chunk],
            prompts=[question_for(r, use_cf, prompting.prompt, trained.get("prompt")) for r in chunk],
            num_samples=g.num_samples,
            temperature=g.temperature,
            top_p=g.top_p,
            max_new_tokens=g.max_new_tokens,
            batch_size=g.batch_size,
            counterfactuals=[r.counterfactual for r in chunk]
            if use_cf and any(r.counterfactual for r in chunk)
            else None,
            system_prompt=prompting.system_prompt,
            seed=seed,
        )
    except UserInputError as err:
        where = f"{chunk[0].origin}..{chunk[-1].origin}" if chunk[0].origin else "images"
        raise UserInputError(f"{where}: {err}") from None


def _row(key: str, record, samples: list[str]) -> dict[str, Any]:  # one line of explanations.jsonl
    row: dict[str, Any] = {"key": key, **record.to_json(), "explanations": samples}
    if record.cause:
        row["correct"] = [predicted_cause(s, cause_candidates(record.cause)) == record.cause for s in samples]
    return row


def _report_accuracy(done: list[dict], out: Path) -> None:
    """Where causes are known: print the per-cause accuracy table and write its mean beside the explanations."""
    scored = [r for r in done if "cause" in r]
    if not scored:
        return
    columns = (*CAUSES, *sorted({r["cause"] for r in scored} - set(CAUSES)))
    table = per_cause_accuracy([r["cause"] for r in scored], [r["explanations"][0] for r in scored], columns)
    print_accuracy_table({"explainer": table}, title=f"Explanation accuracy, {len(scored)} pairs")
    # a cause without pairs has no accuracy: null, not NaN (which no JSON reader accepts)
    write_json_atomic(out.with_name(out.name + ".accuracy.json"), {k: finite_or_none(v) for k, v in table.items()})
