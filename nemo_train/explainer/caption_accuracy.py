"""Held-out caption accuracy of an explainer taught to describe generated images, per factor."""

from __future__ import annotations

import lightning as L
import torch
from torchmetrics import MeanMetric, MetricCollection

from datamodules.explanations import question_for
from datamodules.explanations.captions import CaptionFacts, caption_references, facts_named, parse_caption
from nemo_train.explainer.distributed import generation_context
from nemo_train.explainer.generation import generate_explanations


class CaptionAccuracyCallback(L.Callback):
    """After each validation, captions the datamodule's held-out images greedily and scores every factor.

    A factor of a caption is right when the generated caption states the reference caption's value of it
    (:func:`datamodules.explanations.captions.parse_caption`). Logs ``val/caption_acc`` (the mean over the
    factors) and ``val/caption_acc/<factor>`` (the class attribute too, outside the mean), also kept in
    :attr:`last_result`. Only held-out pairs whose answer is a caption of the fact sheet are scored. Skipped
    during the sanity check; under DDP each rank captions its share and the means are reduced across ranks.

    Args:
        facts: the generator whose fact sheet the captions follow.
        every_n_epochs: run after every n-th validation.
        max_samples: caption at most this many held-out images (all by default).
        max_new_tokens, batch_size: generation settings.
    """

    def __init__(
        self,
        facts: CaptionFacts = "shifts",
        every_n_epochs: int = 1,
        max_samples: int | None = None,
        max_new_tokens: int = 40,
        batch_size: int = 32,
    ) -> None:
        self.facts = facts_named(facts)
        self.every_n_epochs = max(1, every_n_epochs)
        self.max_samples = max_samples
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.attributes = [self.facts.class_attribute, *(f.name for f in self.facts.factors)]
        self.accuracy = MetricCollection({a: MeanMetric() for a in self.attributes}, compute_groups=False)
        self.last_result: dict[str, float] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        records = caption_references(getattr(trainer.datamodule, "val_records", []), self.facts)
        records = records[: self.max_samples] if self.max_samples else records
        if not records:
            return
        mine = records[trainer.global_rank :: trainer.world_size]
        settings = pl_module.prompting or {}
        texts: list[str] = []
        with generation_context(trainer) as generate_kwargs:
            if mine:
                samples = generate_explanations(
                    pl_module,
                    [r.image for r in mine],
                    prompts=[question_for(r, False, None, settings.get("prompt")) for r in mine],
                    max_new_tokens=self.max_new_tokens,
                    batch_size=self.batch_size,
                    generate_kwargs=generate_kwargs,
                )
                texts = [s[0] for s in samples]
        self.accuracy = self.accuracy.to(pl_module.device)
        for record, text in zip(mine, texts):
            said, truth = parse_caption(text, self.facts), parse_caption(record.explanation or "", self.facts)
            for attribute in self.attributes:
                hit = float(said[attribute] == truth[attribute])
                self.accuracy[attribute].update(torch.tensor(hit, device=pl_module.device))
        result = {attribute: float(value) for attribute, value in self.accuracy.compute().items()}
        self.accuracy.reset()
        factors = [f.name for f in self.facts.factors]
        result["average"] = sum(result[f] for f in factors) / len(factors)
        self.last_result = result
        for attribute, value in result.items():
            name = "val/caption_acc" if attribute == "average" else f"val/caption_acc/{attribute}"
            pl_module.log(name, value, prog_bar=attribute == "average", sync_dist=False)
