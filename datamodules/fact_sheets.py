"""Every generator's fact sheet (:class:`~datamodules.facts.DatasetFacts`), by dataset name.

Each generator writes its sheet beside its renderer (CMNIST in :mod:`datamodules.cmnist`, CLEVR in
:mod:`datamodules.clevr`, NICO-like in :mod:`datamodules.nico`, the shifts digits in
:mod:`datamodules.shifts_render`); this module only lists them, so that the captions, NEMO, the model-differences
condition spaces and the failure-mode sentences look a sheet up by name instead of restating it.
"""

from __future__ import annotations

from datamodules.clevr import FACTS as CLEVR_FACTS
from datamodules.cmnist import FACTS as CMNIST_FACTS
from datamodules.facts import DatasetFacts
from datamodules.nico import FACTS as NICO_FACTS
from datamodules.shifts_render import FACTS as SHIFTS_FACTS
from nemo_train.errors import UserInputError

#: The sheet of every generator, by dataset name.
SHEETS: dict[str, DatasetFacts] = {f.name: f for f in (CMNIST_FACTS, CLEVR_FACTS, NICO_FACTS, SHIFTS_FACTS)}
#: The sheet of the embedded default benchmark (CMNIST): a part configured without a benchmark's known cause
#: falls back to its editable factors and object word.
DEFAULT_FACTS: DatasetFacts = CMNIST_FACTS
#: The default benchmark's editable factors (``("color", "angle")``), the default of every edit reader.
DEFAULT_EDITABLE: tuple[str, ...] = tuple(DEFAULT_FACTS.editable)


def fact_sheet(name: str) -> DatasetFacts:
    """The sheet of dataset ``name``; a one-line error names the known ones."""
    if name not in SHEETS:
        raise UserInputError(f"no fact sheet for dataset {name!r}; expected one of {sorted(SHEETS)}")
    return SHEETS[name]
