"""What ``lbee`` observes of a classifier on a split: probabilities, joint-space embeddings, images, labels and
attributes, shared out over processes batch by batch."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Subset

from nemo_train.lbee.encoders import Encoder
from nemo_train.models.targets import Target
from nemo_train.quiet import progress_bar
from nemo_train.sharding import current_ranks


@torch.no_grad()
def predict_batches(model: Target, encoder: Encoder, dataset, starts: list[int], batch_size: int) -> list:
    """``(start, batch, probabilities, embeddings)`` of the batches of ``dataset`` beginning at ``starts``."""
    out = []
    bar = progress_bar(
        starts, desc="lbee: classify and embed", unit="batch", leave=False, disable=not current_ranks().is_main
    )
    for start in bar:
        indices = range(start, min(start + batch_size, len(dataset)))
        batch = next(iter(DataLoader(Subset(dataset, indices), batch_size=batch_size, shuffle=False)))
        probs = model.predict_proba(batch["image"].to(model.device)).cpu()
        out.append((start, batch, probs, encoder.encode_image(batch["image"]).cpu()))
    return out


def predict(model: Target, encoder: Encoder, dataset, batch_size: int = 256):
    """Probabilities, image embeddings, images, labels and attributes of ``dataset`` (``None`` on every process
    but the first). Several processes each compute every ``world_size``-th batch (the very batches of a
    one-process run, so the numbers are the same) and the first gathers them in order."""
    ranks = current_ranks()
    mine = predict_batches(model, encoder, dataset, ranks.shard(range(0, len(dataset), batch_size)), batch_size)
    gathered = ranks.gather(mine)
    if gathered is None:
        return None
    found = sorted((item for part in gathered for item in part), key=lambda item: item[0])
    probs, embeds, images, labels, attrs = [], [], [], [], {}
    for _, batch, batch_probs, batch_embeds in found:
        probs.append(batch_probs)
        embeds.append(batch_embeds)
        images.append(batch["image"])
        labels.append(batch["label"])
        for k, v in batch["attrs"].items():
            attrs.setdefault(k, []).append(v)
    attrs = {k: torch.cat(v) for k, v in attrs.items()}
    attrs["label"] = torch.cat(labels)
    return torch.cat(probs), torch.cat(embeds), torch.cat(images), torch.cat(labels), attrs
