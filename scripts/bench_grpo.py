"""Our GRPO stage against TRL's ``GRPOTrainer`` on the same model, errors, reward and seed: reward curves and speed.

    .venv/bin/python scripts/bench_grpo.py --teacher checkpoints/distill_zoo/teacher \\
        --adapter checkpoints/distill_zoo/adapter --steps 30

Both start from the same explainer (the tiny embedded model with ``--adapter``, every adapter weight trained, as
``configs/explainer/grpo_shifts.yaml`` does), answer the same errors (the teacher's ``pairs/train.jsonl``: picture
and question as distilled) and are rewarded by the same :class:`~nemo_train.nemo.reward.VerifiedEditReward` over
the teacher's classifiers. The settings are matched: ``--batch_size`` errors per step, ``--group_size`` answers per
error, sampling at temperature 1 without top-k / top-p, AdamW at ``--lr`` with a linear decay and gradients clipped
to norm 1 (TRL's default), the KL reference a frozen copy of the starting adapter in both, the per-answer-mean
GRPO loss (TRL's ``loss_type="grpo"``), rewards scaled by each group's std, KL weight ``--kl_coef``, one update per
sampled batch. With ``--order file`` (default) both loops see the same batches of errors, in the pair file's order
(``shuffled``: each loop's own seeded order); the answers are sampled from each loop's own random stream. Prints the
mean reward of each step side by side, the mean of the last ``--window`` steps, and steps per second of each
training loop (model loading and the first step excluded).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch

from datamodules.explanations import build_messages
from datamodules.explanations.error_prompts import ErrorPromptsDataModule
from nemo_train.console import print_table
from nemo_train.explainer.grpo import GRPOModule
from nemo_train.models.trainer import fit_quietly
from nemo_train.models.vlm import TINY_MODEL, attach_adapter, load_processor, load_vlm
from nemo_train.nemo.reward import VerifiedEditReward


def steps_per_second(ends: list[float]) -> float:
    """Steps per second after the first step (the first is warm-up), from the wall time each step ended."""
    return (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 else float("nan")


class StepRewards(L.Callback):
    """The mean reward of every training step and the wall time it ended."""

    def __init__(self) -> None:
        self.rewards: list[float] = []
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.rewards.append(float(trainer.callback_metrics["train/reward"]))
        self.ends.append(time.perf_counter())


def data(args: argparse.Namespace) -> ErrorPromptsDataModule:
    pairs = Path(args.teacher) / "pairs" / "train.jsonl"
    return ErrorPromptsDataModule(
        str(pairs), batch_size=args.batch_size, max_errors=args.max_errors, shuffle=args.order == "shuffled"
    )


def ours(args: argparse.Namespace, reward: VerifiedEditReward) -> tuple[list[float], float]:
    """Our GRPO stage: (mean reward per step, steps per second)."""
    L.seed_everything(args.seed, verbose=False)
    module = GRPOModule(
        reward=reward,
        group_size=args.group_size,
        kl_coef=args.kl_coef,
        max_new_tokens=args.max_new_tokens,
        model_name_or_path=TINY_MODEL,
        adapter=args.adapter,
        lr=args.lr,
        visual_lr=args.lr,
        table_every_n_steps=0,
    )
    steps = StepRewards()
    with tempfile.TemporaryDirectory() as root:
        fit_quietly(
            module, data(args), max_epochs=-1, max_steps=args.steps, callbacks=[steps], default_root_dir=root,
            limit_val_batches=0, gradient_clip_val=1.0,
        )  # fmt: skip
    return steps.rewards, steps_per_second(steps.ends)


def trl_dataset(args: argparse.Namespace):
    """The same errors as TRL's conversational prompt rows, each with its picture and what the reward needs."""
    from datasets import Dataset

    dm = data(args)
    dm.setup("fit")
    rows = []
    for i in range(len(dm.train_set)):
        item = dm.train_set[i]
        error = item["error"]
        rows.append(
            {
                "prompt": build_messages(item["prompt"], item["system"]),
                "image": item["picture"],
                **{k: error[k] for k in ("classifier", "sample_id", "label", "prediction")},
            }
        )
    return Dataset.from_list(rows)


def trl(args: argparse.Namespace, reward: VerifiedEditReward) -> tuple[list[float], float]:
    """TRL's ``GRPOTrainer`` with matched settings: (mean reward per step, steps per second)."""
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    def reward_func(prompts, completions, classifier, sample_id, label, prediction, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        texts = [t if isinstance(t, str) else " ".join(p.get("text", "") for p in t) for t in texts]
        errors = [
            {"classifier": c, "sample_id": s, "label": y, "prediction": p}
            for c, s, y, p in zip(classifier, sample_id, label, prediction)
        ]
        texts = [t.strip() for t in texts]
        if args.show_answers:
            print("TRL answer:", texts[0])
        return reward(errors, texts)[0]

    class Clock(TrainerCallback):
        ends: list[float] = []

        def on_step_end(self, *a, **k):
            self.ends.append(time.perf_counter())

    dataset = trl_dataset(args)
    torch.manual_seed(args.seed)
    model = attach_adapter(load_vlm(TINY_MODEL, dtype=torch.float32), args.adapter, trainable=True)
    processor = load_processor(args.adapter)
    processor.tokenizer.padding_side = "left"
    with tempfile.TemporaryDirectory() as root:
        config = GRPOConfig(
            output_dir=root,
            per_device_train_batch_size=args.batch_size * args.group_size,
            num_generations=args.group_size,
            max_completion_length=args.max_new_tokens,
            learning_rate=args.lr,
            lr_scheduler_type="linear",
            weight_decay=0.0,
            beta=args.kl_coef,
            loss_type="grpo",
            scale_rewards="group",
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_steps=args.steps,
            logging_steps=1,
            seed=args.seed,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            shuffle_dataset=args.order == "shuffled",
        )
        clock = Clock()
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_func,
            args=config,
            train_dataset=dataset,
            processing_class=processor,
            callbacks=[clock],
        )
        trainer.remove_callback(PrinterCallback)  # quiet: the curves are printed at the end
        trainer.train()
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    return rewards, steps_per_second(clock.ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="checkpoints/distill_zoo/teacher", help="a distill-teacher output folder")
    parser.add_argument("--adapter", default="checkpoints/distill_zoo/adapter", help="the starting explainer adapter")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch_size", type=int, default=4, help="errors per step")
    parser.add_argument("--group_size", type=int, default=4, help="answers per error")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--max_errors", type=int, default=None, help="use only the first errors of the pair file")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--kl_coef", type=float, default=0.04)
    parser.add_argument("--window", type=int, default=10, help="steps averaged at the end of each curve")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--order",
        choices=["file", "shuffled"],
        default="file",
        help="errors in the pair file's order (the same batches in both loops) or each loop's own seeded shuffle",
    )
    parser.add_argument("--device", default="cpu", help="where the reward's classifiers run")
    parser.add_argument("--show_answers", action="store_true", help="print one TRL answer per step")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamed-option notices
    reward = VerifiedEditReward(args.teacher, device=args.device)
    reward.load()  # the teacher's classifiers and errors, before either loop is timed
    ours_curve, ours_speed = ours(args, reward)
    trl_curve, trl_speed = trl(args, reward)
    rows = [
        [step + 1, a, b]
        for step, (a, b) in enumerate(zip(ours_curve + [None] * len(trl_curve), trl_curve + [None] * len(ours_curve)))
        if a is not None or b is not None
    ]
    print_table(["step", "ours: reward", "TRL: reward"], rows, title="GRPO reward per step (mean over the answers)")

    def tail(curve: list[float]) -> float:
        last = curve[-args.window :]
        return sum(last) / len(last) if last else float("nan")

    print_table(
        ["trainer", f"reward, last {args.window} steps", "steps / s", "speed vs TRL"],
        [["ours", tail(ours_curve), ours_speed, ours_speed / trl_speed], ["TRL", tail(trl_curve), trl_speed, 1.0]],
        title=f"GRPO: ours vs TRL GRPOTrainer ({args.steps} steps, {args.batch_size} errors x {args.group_size} answers)",
        digits=3,
    )


if __name__ == "__main__":
    main()
