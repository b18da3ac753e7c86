"""Generation inside a sharded training run with uneven work per rank.

Under FSDP and DeepSpeed ZeRO-3 every forward gathers parameters from all ranks, so every rank must run
the same forwards: ``synced_gpus=True`` keeps the ranks stepping together inside one ``generate`` call,
and :func:`explain_in_lockstep` gives every rank the same number of calls, padding a rank with fewer
images (or none) with dummy batches whose answers are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import lightning as L
import torch
import torch.distributed as dist

from datamodules.explanations import question_for
from nemo_train.explainer.distributed import generation_context, lockstep
from nemo_train.explainer.generation import generate_explanations

T = TypeVar("T")
#: ``(images, prompts, counterfactuals or None) -> one answer per image``: one ``generate`` call
GenerateBatch = Callable[[list[Any], list[str], list[Any] | None], list[str]]


def max_over_ranks(value: int, device: torch.device | str = "cpu") -> int:
    """The largest ``value`` over the ranks of the default process group (``value`` itself without one).

    A collective: every rank must call it. ``device`` is where the one-number tensor lives (the backend's
    device: CPU for gloo, the rank's GPU for NCCL).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    count = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def padded_batches(
    items: Sequence[T], batch_size: int, synced: bool, device: torch.device | str = "cpu"
) -> list[list[T]]:
    """``items`` in batches of ``batch_size``; when ``synced``, empty batches are appended until this rank has
    as many batches as the rank with the most (:func:`max_over_ranks`, a collective)."""
    batches = [list(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
    if synced:
        batches += [[] for _ in range(max_over_ranks(len(batches), device) - len(batches))]
    return batches


def run_in_lockstep(
    images: Sequence[Any],
    prompts: Sequence[str],
    generate: GenerateBatch,
    batch_size: int,
    synced: bool,
    dummy: tuple[Any, str],
    counterfactuals: Sequence[Any] | None = None,
    device: torch.device | str = "cpu",
) -> list[str]:
    """One answer per image from ``generate`` called batch by batch; when ``synced`` every rank makes the same
    number of calls: a rank out of work answers ``dummy`` (an ``(image, prompt)`` pair) and drops the answer."""
    order = list(range(len(images)))
    answers: list[str] = []
    for batch in padded_batches(order, batch_size, synced, device):
        if not batch:
            generate([dummy[0]], [dummy[1]], None)
            continue
        cfs = [counterfactuals[i] for i in batch] if counterfactuals is not None else None
        answers += generate([images[i] for i in batch], [prompts[i] for i in batch], cfs)
    return answers


def explain_in_lockstep(
    trainer: L.Trainer | None,
    pl_module: L.LightningModule,
    images: Sequence[Any],
    prompts: Sequence[str],
    counterfactuals: Sequence[Any] | None = None,
    max_new_tokens: int = 48,
    batch_size: int = 8,
) -> list[str]:
    """Greedy explanations (one per image) from the explainer being trained, safe under FSDP / ZeRO-3 when
    ranks hold different numbers of images (none included): every rank calls this, with its own share."""
    synced = lockstep(trainer)
    dummy = (torch.zeros(3, 32, 32), prompts[0] if prompts else "Describe the image.")
    with generation_context(trainer, pl_module) as generate_kwargs:

        def generate(batch_images: list[Any], batch_prompts: list[str], cfs: list[Any] | None) -> list[str]:
            out = generate_explanations(
                pl_module,
                batch_images,
                prompts=batch_prompts,
                counterfactuals=cfs,
                max_new_tokens=max_new_tokens,
                batch_size=len(batch_images),
                generate_kwargs=generate_kwargs,
            )
            return [samples[0] for samples in out]

        return run_in_lockstep(
            images, prompts, generate, batch_size, synced, dummy, counterfactuals, device=pl_module.device
        )


def answer_held_out(
    trainer: L.Trainer | None,
    pl_module: L.LightningModule,
    records: Sequence[Any],
    max_new_tokens: int = 48,
    batch_size: int = 8,
) -> list[str]:
    """Greedy answers to held-out pairs (``ExplanationRecord``), asked as the explainer was trained: the record's
    question (or the trained prompt) and, for an explainer trained with counterfactuals when every record has one,
    the counterfactual beside the image (the evidence view's montage). Call it on every rank, with its share."""
    settings = getattr(pl_module, "prompting", None) or {}
    use_cf = bool(settings.get("use_counterfactual")) and all(r.counterfactual for r in records)
    return explain_in_lockstep(
        trainer,
        pl_module,
        [r.image for r in records],
        prompts=[question_for(r, use_cf, None, settings.get("prompt")) for r in records],
        counterfactuals=[r.counterfactual for r in records] if use_cf else None,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
    )
