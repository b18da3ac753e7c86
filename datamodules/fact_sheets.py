"""Every generator's fact sheet (:class:`~datamodules.facts.DatasetFacts`), by dataset name.

Each generator writes its sheet beside its renderer (CMNIST in :mod:`datamodules.cmnist`, CLEVR in
:mod:`datamodules.clevr`, NICO-like in :mod:`datamodules.nico`, the shifts digits in
:mod:`datamodules.shifts_render`; the six causes of low competency in :mod:`datamodules.six_cause_facts`); this
module only lists them, so that the captions, NEMO, the model-differences condition spaces and the failure-mode
sentences look a sheet up by name instead of restating it. It also gathers, by factor name, what the offline
keyword deriver reads (:data:`FACTOR_STEMS`, :data:`NEUTRAL_VALUES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datamodules.clevr import FACTS as CLEVR_FACTS
from datamodules.cmnist import FACTS as CMNIST_FACTS
from datamodules.facts import DatasetFacts, Factor
from datamodules.nico import FACTS as NICO_FACTS
from datamodules.shifts_render import FACTS as SHIFTS_FACTS
from datamodules.six_cause_facts import FACTS as SIX_CAUSE_FACTS
from nemo_train.errors import UserInputError

#: The sheet of every generator, by dataset name.
SHEETS: dict[str, DatasetFacts] = {
    f.name: f for f in (CMNIST_FACTS, CLEVR_FACTS, NICO_FACTS, SHIFTS_FACTS, SIX_CAUSE_FACTS)
}
#: The sheet of the embedded default benchmark (CMNIST): a part configured without a benchmark's known cause
#: falls back to its editable factors and object word.
DEFAULT_FACTS: DatasetFacts = CMNIST_FACTS
#: The default benchmark's editable factors (``("color", "angle")``), the default of every edit reader.
DEFAULT_EDITABLE: tuple[str, ...] = tuple(DEFAULT_FACTS.editable)


def _by_factor_name(read: Callable[[Factor], Any]) -> dict[str, Any]:
    """``{factor name: read(factor)}`` over every sheet's factors where ``read`` gives something (not empty,
    not ``None``). A factor name means one thing in every sheet: two sheets that disagree are an error."""
    found: dict[str, Any] = {}
    for sheet in SHEETS.values():
        for factor in sheet.factors:
            value = read(factor)
            if value is None or value == ():
                continue
            if found.setdefault(factor.name, value) != value:
                raise ValueError(
                    f"{sheet.name}: factor {factor.name!r} has {value!r}; another sheet has {found[factor.name]!r}"
                )
    return found


#: Per factor name, the word beginnings the offline keyword deriver reads as naming it (:attr:`Factor.stems`);
#: a factor without any is named by its name alone.
FACTOR_STEMS: dict[str, tuple[str, ...]] = _by_factor_name(lambda f: f.stems)
#: Per factor name, the value an edit falls back to when an explanation names no other (:attr:`Factor.neutral`).
NEUTRAL_VALUES: dict[str, Any] = _by_factor_name(lambda f: f.neutral)


def fact_sheet(name: str) -> DatasetFacts:
    """The sheet of dataset ``name``; a one-line error names the known ones."""
    if name not in SHEETS:
        raise UserInputError(f"no fact sheet for dataset {name!r}; expected one of {sorted(SHEETS)}")
    return SHEETS[name]
