"""Diff_Model(f_A, f_B, c): accuracy of model A minus accuracy of model B on n samples of G(c).

:class:`DiffModel` draws all images of many conditions and runs them through each model in large
batches (``images_per_batch`` at a time), and caches every value by (model identities, generator,
condition, n, seed): in memory, and in a JSON file when ``cache_file`` is given, so a rerun or a
second explainer never renders a condition twice.

On several processes (:func:`~nemo_train.sharding.current_ranks`) the first process drives the run and the others
serve it (:meth:`DiffModel.serve`): each sweep (the conditions not yet cached, in the order asked) is sent to all,
each process measures every ``world_size``-th condition, and every process receives every value. A condition's
images depend on (condition, n, seed) only and each image is classified on its own, so its value does not depend
on which process measured it or which conditions shared its batch; the first process alone writes the cache file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nemo_train.differences.conditions import Condition
from nemo_train.differences.generators import ConditionalGenerator
from nemo_train.differences.models import ComparedModel
from nemo_train.sharding import Ranks, current_ranks
from nemo_train.store import write_bytes_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """One measured condition: accuracies of both models and their difference."""

    condition: Condition
    acc_a: float
    acc_b: float

    @property
    def diff(self) -> float:
        return self.acc_a - self.acc_b


def read_cache(path: Path) -> dict[str, tuple[float, float]]:
    """The values of a cache file; a damaged file (truncated, not JSON, wrong shape) is set aside with one
    warning and its values are measured again (every key names the models' weights, so a value is never stale)."""
    try:
        data = json.loads(path.read_text())
        return {str(k): (float(v[0]), float(v[1])) for k, v in data.items()}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
        log.warning("%s is damaged (%s); measuring its conditions again", path, type(err).__name__)
        return {}


class DiffModel:
    """Batched, cached Diff_Model over a generator and a model pair.

    Args:
        model_a, model_b: the compared models (already prepared).
        generator: the conditional generator.
        n: samples per condition.
        seed: sampling seed (a condition's images depend on (condition, n, seed) only).
        images_per_batch: images rendered and classified at once.
        cache_file: JSON file keeping computed values across runs (``None``: memory only); read and written by
            the first process only.
        ranks: the processes sharing the sweeps (default: those of the command being run).
    """

    def __init__(
        self,
        model_a: ComparedModel,
        model_b: ComparedModel,
        generator: ConditionalGenerator,
        n: int = 20,
        seed: int = 0,
        images_per_batch: int = 4096,
        cache_file: str | Path | None = None,
        ranks: Ranks | None = None,
    ) -> None:
        self.ranks = ranks or current_ranks()
        self.model_a, self.model_b, self.generator = model_a, model_b, generator
        self.n, self.seed, self.images_per_batch = n, seed, images_per_batch
        self.prefix = f"{model_a.identity}|{model_b.identity}|{generator.identity}|n={n}|seed={seed}|"
        self.cache_file = Path(cache_file) if cache_file else None
        self.cache: dict[str, tuple[float, float]] = {}
        if self.cache_file is not None and self.cache_file.is_file() and self.ranks.is_main:
            self.cache = read_cache(self.cache_file)
        self.images_generated = 0

    def _key(self, condition: Condition) -> str:
        return self.prefix + condition.key()

    def observe(self, conditions: Sequence[Condition], batched: bool = True) -> list[Observation]:
        """Observations of ``conditions`` (cached ones are not recomputed); ``batched=False`` renders
        and classifies one condition at a time (the benchmark's reference)."""
        todo = list(dict.fromkeys(c for c in conditions if self._key(c) not in self.cache))
        per_chunk = max(1, self.images_per_batch // self.n) if batched else 1
        if todo:
            if self.ranks.world_size > 1:
                self.ranks.on_main(lambda: (todo, per_chunk))  # the sweep, to the processes in :meth:`serve`
                found = {
                    k: v for part in self.ranks.all_gather(self._measure(todo, per_chunk)) for k, v in part.items()
                }
            else:
                found = self._measure(todo, per_chunk)
            for condition in todo:  # in the order asked, as a one-process run fills the cache
                self.cache[self._key(condition)] = found[self._key(condition)]
            self.save()
        return [Observation(c, *self.cache[self._key(c)]) for c in conditions]

    def _measure(self, todo: list[Condition], per_chunk: int) -> dict[str, tuple[float, float]]:
        """Accuracies of this process's share of ``todo`` (all of it on one process), ``per_chunk`` conditions
        rendered and classified at once."""
        mine, found = self.ranks.shard(todo), {}
        for start in range(0, len(mine), per_chunk):
            chunk = mine[start : start + per_chunk]
            images, labels = self.generator.generate(chunk, self.n, self.seed)
            self.images_generated += len(images)
            correct_a = self._correct(self.model_a, images, labels)
            correct_b = self._correct(self.model_b, images, labels)
            acc_a = correct_a.view(len(chunk), -1).float().mean(1).tolist()
            acc_b = correct_b.view(len(chunk), -1).float().mean(1).tolist()
            for condition, a, b in zip(chunk, acc_a, acc_b):
                found[self._key(condition)] = (a, b)
        return found

    def serve(self) -> None:
        """On every process but the first: measure this process's share of each sweep the first one starts, until
        it calls :meth:`stop`."""
        while (sweep := self.ranks.on_main(lambda: None)) is not None:
            todo, per_chunk = sweep
            self.ranks.all_gather(self._measure(todo, per_chunk))

    def stop(self) -> None:
        """On the first process: release the processes serving in :meth:`serve` (nothing on one process)."""
        if self.ranks.world_size > 1 and self.ranks.is_main:
            self.ranks.on_main(lambda: None)

    def _correct(self, model: ComparedModel, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        preds = torch.cat([model.predict(part) for part in images.split(self.images_per_batch)])
        return preds == labels

    def __call__(self, conditions: Sequence[Condition]) -> np.ndarray:
        """Diff_Model values ``float[len(conditions)]``."""
        return np.array([o.diff for o in self.observe(conditions)], dtype=float)

    def save(self) -> None:
        if self.cache_file is not None and self.ranks.is_main:
            write_bytes_atomic(self.cache_file, json.dumps(self.cache).encode("utf-8"))  # a full disk: one line
