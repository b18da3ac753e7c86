"""A model pair with a known difference, for tests: the "images" are the condition attributes
themselves, and each model is a rule that fails exactly on its planted bias.

Model A fails on digits 0-4 unless red; model B fails on digits 5-9 unless blue (the CMNIST pair's
bias), each on a seeded ``fail_rate`` share of those samples. Diff_Model is therefore known in
closed form: -fail_rate on 0-4 non-red, +fail_rate on 5-9 non-blue, 0 elsewhere (up to sampling).
"""

from __future__ import annotations

import numpy as np
import torch

from datamodules.cmnist import COLOR_NAMES
from nemo_train.differences.generators import CMNIST_SPACE, ConditionalGenerator, condition_rng
from nemo_train.differences.models import ComparedModel


class AttributeEchoGenerator(ConditionalGenerator):
    space = CMNIST_SPACE
    task_description = "digit classifiers"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conditions, n, seed):
        self.calls += 1
        rows = []
        for c in conditions:
            u = condition_rng(c, seed).random(n)
            v = c.values
            rows += [[v["digit"], COLOR_NAMES.index(v["color"]), v["angle"], x] for x in u]
        images = torch.tensor(rows, dtype=torch.float32).reshape(-1, 4)
        return images, images[:, 0].long()


class RuleModel(ComparedModel):
    def __init__(self, name: str, digits: range, keep_colour: str, fail_rate: float = 1.0) -> None:
        self.name, self.digits, self.keep, self.fail_rate = name, set(digits), COLOR_NAMES.index(keep_colour), fail_rate

    def prepare(self, work_dir, device):
        pass

    def predict(self, images):
        digit, colour, u = images[:, 0].long(), images[:, 1].long(), images[:, 3]
        biased = torch.tensor([int(d) in self.digits for d in digit.tolist()]) & (colour != self.keep)
        wrong = biased & (u < self.fail_rate)
        return torch.where(wrong, (digit + 1) % 10, digit)

    @property
    def identity(self):
        return f"{self.name}:{sorted(self.digits)}:{self.keep}:{self.fail_rate}"


def rule_pair(fail_rate: float = 0.9) -> tuple[RuleModel, RuleModel]:
    return RuleModel("A", range(5), "red", fail_rate), RuleModel("B", range(5, 10), "blue", fail_rate)


def true_sign(condition) -> int:
    v = condition.values
    if v["digit"] < 5 and v["color"] != "red":
        return -1
    if v["digit"] >= 5 and v["color"] != "blue":
        return 1
    return 0


def expected_diffs(conditions, fail_rate: float = 0.9) -> np.ndarray:
    return np.array([fail_rate * true_sign(c) for c in conditions])


HUMAN = (
    "Model A is worse than model B when the digits of 0, 1, 2, 3, and 4 are not colored in red regardless of "
    "the rotation angle.\n\nModel B is worse than model A when the digits of 5, 6, 7, 8, and 9 are not colored "
    "in blue regardless of the rotation angle."
)


def swap_models(text: str) -> str:
    return (
        text.replace("Model A", "\0").replace("model A", "\1").replace("Model B", "Model A")
        .replace("model B", "model A").replace("\0", "Model B").replace("\1", "model B")
    )  # fmt: skip
