"""N classifiers trained together in one LightningModule: stacked weights run with ``torch.func``.

:class:`StackedClassifiers` holds the weights of ``N`` :class:`~nemo_train.models.ClassifierModule` backbones
stacked along a first axis (``torch.func.stack_module_state``): parameter ``w`` of member ``k`` is ``w[k]``, and
the batch-normalisation statistics are stacked the same way. One training step takes a stacked batch (member
``k``'s images at index ``k``, :class:`~datamodules.shifts_zoo.ShiftsZooDataModule`) and sums the members'
cross-entropy losses, so each member's gradient is the one its own ``fit`` would compute; AdamW and its
learning-rate schedule act element by element, so every member follows its own separate optimisation.

Two ways to run the members, with the same results: ``vmap`` (``torch.func.vmap`` over
``functional_call``: one batched call per layer, which pays off on a GPU) and ``loop`` (``functional_call``
member by member on views of the stacked weights: the fastest on a few CPU cores, where batched convolutions
are no faster than separate ones). :meth:`StackedClassifiers.member_state` cuts a member out as an ordinary
``ClassifierModule`` state dict; :func:`member_module` builds that module.
"""

from __future__ import annotations

import copy
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from nemo_train.errors import UserInputError
from nemo_train.models.classifier import ClassifierModule, adamw_one_cycle

__all__ = ["Execution", "StackedClassifiers", "member_module"]

#: How the stacked members run: one batched call per layer, or member after member.
Execution = Literal["vmap", "loop"]


def _key(name: str) -> str:
    """A parameter name usable as a module attribute (``features.0.weight`` -> ``features__0__weight``)."""
    return name.replace(".", "__")


class StackedClassifiers(L.LightningModule):
    """``num_members`` classifiers (``ClassifierModule`` backbones) with stacked weights, trained together.

    Logs ``train/loss`` (mean over members), ``val/acc`` (mean) and ``val/acc_<k>`` per member; after each
    validation it keeps each member's best weights so far (by its validation accuracy) in :attr:`best_states`,
    and after ``test`` each member's accuracy in :attr:`test_acc`.

    Args:
        num_members: how many classifiers.
        backbone, num_classes, in_chans, lr, weight_decay, label_smoothing: the ``ClassifierModule`` arguments
            every member shares (no pretrained weights: each member starts from its own random draw).
        member_seed: member ``k`` is initialised as ``ClassifierModule`` is under ``torch.manual_seed(member_seed
            + k)`` (what a separate ``fit`` with ``seed_everything: member_seed + k`` starts from).
        execution: ``vmap`` or ``loop`` (see the module docstring).
    """

    def __init__(
        self,
        num_members: int,
        backbone: str = "bias_cnn",
        num_classes: int = 10,
        in_chans: int = 3,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        label_smoothing: float = 0.0,
        member_seed: int = 0,
        execution: Execution = "loop",
    ) -> None:
        super().__init__()
        if execution not in ("vmap", "loop"):
            raise UserInputError(f"execution={execution!r}; expected 'vmap' or 'loop'")
        if num_members < 1:
            raise UserInputError(f"num_members={num_members}; expected at least one classifier")
        self.save_hyperparameters()
        members = []
        for k in range(num_members):
            torch.manual_seed(member_seed + k)
            members.append(ClassifierModule(**self.member_hparams()))
        params, buffers = stack_module_state([m.model for m in members])
        self.names = list(params)
        self.buffer_names = list(buffers)
        self.stacked = torch.nn.ParameterDict({_key(n): torch.nn.Parameter(v.detach()) for n, v in params.items()})
        for name, value in buffers.items():
            self.register_buffer(f"buf__{_key(name)}", value.detach().clone())
        self.register_buffer("mean", members[0].mean.clone(), persistent=False)
        self.register_buffer("std", members[0].std.clone(), persistent=False)
        # the architecture without weights: every call gives it one member's weights (kept out of the registry)
        self.__dict__["template"] = copy.deepcopy(members[0].model).to("meta")
        self.best_acc = [-1.0] * num_members
        self.best_states: list[dict[str, torch.Tensor]] = [self.member_state(k) for k in range(num_members)]
        self.test_acc: list[float] = []
        self._counts: torch.Tensor | None = None

    def member_hparams(self) -> dict:
        """The arguments of each member's ``ClassifierModule``."""
        keep = ("backbone", "num_classes", "in_chans", "lr", "weight_decay", "label_smoothing")
        return {k: self.hparams[k] for k in keep}

    # ----------------------------------------------------------------- weights
    def weights(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The stacked parameters and buffers under the backbone's own names (``[N, ...]`` each)."""
        params = {n: self.stacked[_key(n)] for n in self.names}
        buffers = {n: getattr(self, f"buf__{_key(n)}") for n in self.buffer_names}
        return params, buffers

    def member_state(self, k: int) -> dict[str, torch.Tensor]:
        """Member ``k``'s weights as a ``ClassifierModule`` state dict (copies on CPU)."""
        params, buffers = self.weights()
        return {f"model.{n}": v[k].detach().cpu().clone() for n, v in {**params, **buffers}.items()}

    # ----------------------------------------------------------------- model API
    def train(self, mode: bool = True) -> StackedClassifiers:
        super().train(mode)
        self.template.train(mode)
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, B, K]`` of stacked images ``[N, B, C, H, W]`` in ``[0, 1]`` (member ``k`` sees ``images[k]``)."""
        n = self.hparams.num_members
        if images.ndim != 5 or images.shape[0] != n or images.shape[2] != self.hparams.in_chans:
            raise UserInputError(f"expected stacked images [{n}, B, C, H, W], got {list(images.shape)}")
        x = (images - self.mean) / self.std
        params, buffers = self.weights()
        if self.hparams.execution == "vmap":
            return vmap(self._member_forward)(params, buffers, x)
        views = ({n: v[k] for n, v in params.items()} for k in range(n))
        stats = ({n: v[k] for n, v in buffers.items()} for k in range(n))
        return torch.stack([self._member_forward(p, b, x[k]) for k, (p, b) in enumerate(zip(views, stats))])

    def _member_forward(self, params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.template, (params, buffers), (x,))

    # ----------------------------------------------------------------- steps
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        logits = self(batch["image"])
        labels = batch["label"]
        smoothing = self.hparams.label_smoothing
        losses = torch.stack([F.cross_entropy(lg, y, label_smoothing=smoothing) for lg, y in zip(logits, labels)])
        if self._trainer is not None:
            self.log("train/loss", losses.mean(), prog_bar=True, batch_size=labels.shape[1])
        return losses.sum()  # each member's gradient is that of its own mean loss

    def _count(self, batch: dict) -> None:
        correct = (self(batch["image"]).argmax(-1) == batch["label"]).sum(1)
        total = torch.full_like(correct, batch["label"].shape[1])
        counts = torch.stack([correct, total]).cpu()
        self._counts = counts if self._counts is None else self._counts + counts

    def _accuracies(self) -> list[float]:
        counts, self._counts = self._counts, None
        return [] if counts is None else (counts[0].double() / counts[1]).tolist()

    def on_validation_epoch_start(self) -> None:
        self._counts = None

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._count(batch)

    def on_validation_epoch_end(self) -> None:
        accuracies = self._accuracies()
        if not accuracies:
            return
        self.log_dict({f"val/acc_{k}": a for k, a in enumerate(accuracies)})
        self.log("val/acc", sum(accuracies) / len(accuracies), prog_bar=True)
        if self.trainer.sanity_checking:
            return
        for k, acc in enumerate(accuracies):
            if acc > self.best_acc[k]:
                self.best_acc[k], self.best_states[k] = acc, self.member_state(k)

    def on_test_epoch_start(self) -> None:
        self._counts = None

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._count(batch)

    def on_test_epoch_end(self) -> None:
        self.test_acc = self._accuracies()
        self.log_dict({f"test/acc_{k}": a for k, a in enumerate(self.test_acc)})

    def configure_optimizers(self):
        """AdamW with a one-cycle schedule, as ``ClassifierModule`` (element-wise: each member its own)."""
        return adamw_one_cycle(self)


def member_module(zoo: StackedClassifiers, k: int, state: dict[str, torch.Tensor] | None = None) -> ClassifierModule:
    """Member ``k`` as an ordinary ``ClassifierModule`` (eval mode) with ``state`` (default: its current weights)."""
    module = ClassifierModule(**zoo.member_hparams())
    module.load_state_dict(zoo.member_state(k) if state is None else state)
    return module.eval()
