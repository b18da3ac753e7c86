"""Two-process DDP on CPU trains the explainer and keeps the adapter identical on both ranks."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import forked_commands
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys, torch, lightning as L
    from datamodules.explanations import ExplanationDataModule
    from nemo_train.explainer import ExplainerModule
    from nemo_train.models.vlm import TINY_MODEL, load_processor

    train, val, out = sys.argv[1:4]
    L.seed_everything(0)
    module = ExplainerModule(lr=1e-2)
    dm = ExplanationDataModule(TINY_MODEL, load_processor, train_jsonl=train, val_jsonl=val, batch_size=2)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=1, num_sanity_val_steps=0, default_root_dir=out)
    trainer.fit(module, dm)
    lora = {n: p.detach().clone() for n, p in module.model.named_parameters() if p.requires_grad}
    torch.save({"lora": lora, "world_size": trainer.world_size, "steps": trainer.global_step}, f"{out}/rank{trainer.global_rank}.pt")
    """
)


@pytest.mark.slow
def test_two_process_ddp_on_cpu_trains(six_cause_pairs, explainer_cache, tmp_path):
    script = tmp_path / "ddp_fit.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "NEMO_TRAIN_CACHE": str(explainer_cache),
        "WANDB_MODE": "disabled",
    }
    argv = [sys.executable, str(script), str(six_cause_pairs["train"]), str(six_cause_pairs["val"]), str(tmp_path)]
    done = forked_commands.run(argv, env, tmp_path, timeout=300)  # rank 0 forked pre-imported, rank 1 a fresh one
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert all(r["world_size"] == 2 and r["steps"] == 3 for r in ranks)
    assert ranks[0]["lora"].keys() == ranks[1]["lora"].keys()
    for name, value in ranks[0]["lora"].items():
        assert torch.equal(value, ranks[1]["lora"][name]), name  # gradients were all-reduced
    lora_b = [v for n, v in ranks[0]["lora"].items() if "lora_B" in n]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # B starts at zero: training moved it
