"""Conditions: what a conditional generator is asked to draw, and the vocabulary that limits them.

A condition fixes generator attributes (CMNIST: digit x colour x angle; CLEVR: shape x material x
colour x size) or is free text with a label (a caption for a text-to-image generator). A
:class:`ConditionSpace` knows the allowed values, turns proposals (e.g. a language model's JSON) into
conditions and says in words why a proposal is rejected (:class:`Rejected`), so a bad proposal is
recorded and skipped, never a crash.
"""

from __future__ import annotations

import itertools
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Rejected(ValueError):
    """A proposed condition outside the generator's vocabulary (the message says why)."""


@dataclass(frozen=True, order=True)
class Condition:
    """One condition: attribute values (``attrs``, in the space's attribute order) or a caption ``text``
    with its class ``label`` (open-set conditions)."""

    attrs: tuple[tuple[str, Any], ...] = ()
    text: str = ""
    label: int | None = None

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.attrs)

    def key(self) -> str:
        """A stable text key (cache keys, JSON records)."""
        if self.attrs:
            return json.dumps(dict(self.attrs), sort_keys=False)
        return json.dumps({"text": self.text, "label": self.label})

    def as_dict(self) -> dict[str, Any]:
        return dict(self.attrs) if self.attrs else {"text": self.text, "label": self.label}


@dataclass(frozen=True)
class Attribute:
    """One generator attribute: its ``values``, the noun used in sentences, and reading hints.

    ``ordinal`` attributes (digit, angle) have numeric values; ``unit`` follows a value in text
    ("-10 degrees"); ``synonyms`` maps a value to other surface forms ("grey" -> "gray").
    """

    name: str
    values: tuple[Any, ...]
    noun: str
    ordinal: bool = False
    unit: str = ""
    synonyms: Mapping[Any, tuple[str, ...]] = field(default_factory=dict)

    def parse_value(self, value: Any) -> Any:
        if self.ordinal:
            try:
                number = float(str(value).replace("°", "").replace("degrees", "").strip())
            except ValueError:
                raise Rejected(f"{self.name}={value!r} is not a number; expected one of {list(self.values)}") from None
            if number not in self.values:
                raise Rejected(f"{self.name}={value!r} is out of range; expected one of {list(self.values)}")
            return type(self.values[0])(number)
        text = str(value).strip().lower()
        forms = {text, text.removesuffix("s"), text.removesuffix("es")}  # "cubes", "spheres"
        for v in self.values:
            if str(v) in forms or forms & set(self.synonyms.get(v, ())):
                return v
        raise Rejected(f"{self.name}={value!r} is not in the vocabulary {list(self.values)}")

    def phrase(self, value: Any) -> str:
        return f"{value} {self.unit}".strip() if self.unit else f"{self.noun} {value}" if self.ordinal else str(value)


class ConditionSpace(ABC):
    """The set of conditions a generator accepts."""

    @abstractmethod
    def parse(self, proposal: Any) -> Condition:
        """A :class:`Condition` from a proposal, or :class:`Rejected` with the reason."""

    @abstractmethod
    def describe(self, condition: Condition) -> str:
        """The condition in words, for prompts and tables."""

    @abstractmethod
    def description(self) -> str:
        """The allowed conditions in words (the ``{Description of Conditions}`` of the exploration prompt)."""

    def example(self) -> dict[str, Any]:
        """One JSON-ready example condition for prompts."""
        return {}


class AttributeSpace(ConditionSpace):
    """Conditions that fix every attribute of a generator to one value of its vocabulary."""

    def __init__(self, attributes: Sequence[Attribute]) -> None:
        self.attributes = list(attributes)
        self.by_name = {a.name: a for a in self.attributes}

    def make(self, **values: Any) -> Condition:
        return self.parse(values)

    def parse(self, proposal: Any) -> Condition:
        if isinstance(proposal, Condition):
            proposal = proposal.values
        if not isinstance(proposal, Mapping):
            raise Rejected(f"expected an object with {list(self.by_name)}; got {str(proposal)[:80]!r}")
        proposal = {str(k).strip().lower(): v for k, v in proposal.items()}
        proposal = {("color" if k == "colour" else k): v for k, v in proposal.items()}
        unknown = sorted(set(proposal) - set(self.by_name) - {"strategy"})
        if unknown:
            raise Rejected(f"unknown attribute(s) {unknown}; expected {list(self.by_name)}")
        missing = [name for name in self.by_name if name not in proposal]
        if missing:
            raise Rejected(f"missing attribute(s) {missing}")
        return Condition(tuple((a.name, a.parse_value(proposal[a.name])) for a in self.attributes))

    def grid(self) -> list[Condition]:
        """Every combination of attribute values, in a fixed order."""
        combos = itertools.product(*(a.values for a in self.attributes))
        return [Condition(tuple(zip(self.by_name, combo))) for combo in combos]

    def describe(self, condition: Condition) -> str:
        return ", ".join(self.by_name[name].phrase(value) for name, value in condition.attrs)

    def description(self) -> str:
        lines = []
        for a in self.attributes:
            kind = "integer" if a.ordinal else "one of"
            lines.append(f"- {a.name}: {kind} {', '.join(str(v) for v in a.values)}{' ' + a.unit if a.unit else ''}")
        return "\n".join(lines)

    def example(self) -> dict[str, Any]:
        return {a.name: a.values[len(a.values) // 2] for a in self.attributes}


class TextSpace(ConditionSpace):
    """Open-set conditions: a short caption and the class it shows.

    A caption must name a term of its class (e.g. "man", "boy" for class 0) and no term of another
    class, and be at most ``max_words`` words, as the paper's condition guidelines ask.
    """

    def __init__(self, class_names: Sequence[str], class_terms: Sequence[Sequence[str]], max_words: int = 25) -> None:
        self.class_names = list(class_names)
        self.class_terms = [tuple(t.lower() for t in terms) for terms in class_terms]
        self.max_words = max_words

    def _terms_in(self, text: str) -> list[int]:
        words = set(re.findall(r"[a-z]+", text.lower()))
        return [i for i, terms in enumerate(self.class_terms) if words & set(terms)]

    def parse(self, proposal: Any) -> Condition:
        if isinstance(proposal, Condition):
            proposal = proposal.as_dict()
        if isinstance(proposal, (list, tuple)) and len(proposal) == 2:
            proposal = {"text": proposal[0], "label": proposal[1]}
        if not isinstance(proposal, Mapping):
            raise Rejected(f"expected {{'text': caption, 'label': class}}; got {str(proposal)[:80]!r}")
        text = str(proposal.get("text") or proposal.get("condition") or "").strip()
        if not text or len(text.split()) > self.max_words:
            raise Rejected(f"caption {text[:80]!r} is empty or longer than {self.max_words} words")
        try:
            label = int(proposal.get("label"))
        except (TypeError, ValueError):
            raise Rejected(f"label {proposal.get('label')!r} is not an integer") from None
        if not 0 <= label < len(self.class_names):
            raise Rejected(f"label {label} out of range 0-{len(self.class_names) - 1}")
        if self._terms_in(text) != [label]:
            raise Rejected(f"caption {text!r} must name a {self.class_names[label]} term and no other class's")
        return Condition(text=text, label=label)

    def describe(self, condition: Condition) -> str:
        return condition.text

    def description(self) -> str:
        classes = "; ".join(
            f"label {i} ({n}): caption names one of {', '.join(t)}"
            for i, (n, t) in enumerate(zip(self.class_names, self.class_terms))
        )
        return f"- text: a short image caption (at most {self.max_words} words)\n- label: {classes}"

    def example(self) -> dict[str, Any]:
        return {"text": f"a {self.class_terms[0][0]} reading in a library", "label": 0}


def sample_conditions(
    pool: Sequence[Condition], k: int, rng: np.random.Generator, exclude: Iterable[Condition] = ()
) -> list[Condition]:
    """``k`` distinct conditions of ``pool`` not in ``exclude`` (fewer if the pool runs out)."""
    excluded = set(exclude)
    free = [c for c in pool if c not in excluded]
    order = rng.permutation(len(free))[:k]
    return [free[i] for i in sorted(order)]
