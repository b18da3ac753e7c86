"""Dataset fact sheets: what a generated dataset's images vary in, written down once.

A :class:`DatasetFacts` names the classes, the attribute that carries the class, and every other factor of
variation (:class:`Factor`): its values, how a sentence names it, the words that name it in free text, its
training-typical value (what a counterfactual edit restores), whether an edit may change it and whether it
is a distractor (it varies in training and test alike and never causes an error), plus the words of every
value in the small CLIP's training captions (:mod:`datamodules.captions`). A biased dataset's sheet also names
its planted ``cause``. A factor may also give the word beginnings the offline keyword deriver reads as naming it
(``rotat``) and the value an edit falls back to when an explanation names no other (``0``: upright). Captions,
judges, reference explainers, editors, the model-differences condition spaces and the failure-mode sentences
read the sheet instead of restating these facts; :mod:`datamodules.fact_sheets` lists the sheets.

Stored attributes follow the renderer convention (docs/ARCHITECTURE.md): a factor whose values are names is
stored as an index into :attr:`Factor.values`; a numeric factor (an angle) is stored as the number itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nemo_train.errors import UserInputError


@dataclass(frozen=True)
class Factor:
    """One factor of variation of a generated dataset.

    Args:
        name: the attribute key in a sample's ``attrs`` (``color``).
        values: the vocabulary (names, or numbers for a numeric factor such as ``angle``).
        word: how a sentence names the factor (``colour``, ``rotation``).
        synonyms: other words that name the factor in free text (``color``, ``hue``, ``tilted``).
        typical: the value every training image of a class with a gap in this factor has (the value a
            counterfactual edit restores, also for an explanation that names the factor but no value); ``None``
            when no value is typical: every value is equally common in training (CLEVR's colour and size, the
            shifts digits' position: an explanation blaming such a factor has nothing to restore), or the typical
            value depends on the class, as for a sheet's planted ``cause`` (CMNIST's colour, CLEVR's material),
            where it is the value the true class had in training (the benchmark's bias, not the sheet).
        editable: whether a counterfactual edit may change it.
        distractor: it varies freely in training and test and never causes an error.
        phrases: how a value reads in the sheet's caption (``{"dotted": "dotted strokes"}``; default the value).
        unit: what follows a numeric value in text (``degrees``).
        spellings: other spellings of a value in free text (``{"grey": ("gray",)}``).
        caption_words: the word of each value in the small CLIP's training captions, one per value (default the
            value names); values sharing a word are captioned together (CMNIST's angles as three tilt words).
        stems: word beginnings that name the factor for the offline keyword deriver, matched at the start of a
            word (``rotat`` for rotated and rotation); default the factor's name.
        neutral: the value an edit falls back to when an explanation names the factor but no other value of it
            (``0``: upright); ``None``: no fallback.

    The keyword deriver is told only a generator's attribute names, so it reads ``stems`` and ``neutral`` by factor
    name from whichever sheet states them (:data:`datamodules.fact_sheets.FACTOR_STEMS`, ``NEUTRAL_VALUES``): a
    factor name means one thing in every sheet, and one sheet states them.
    """

    name: str
    values: tuple[Any, ...]
    word: str
    synonyms: tuple[str, ...] = ()
    typical: Any = None
    editable: bool = True
    distractor: bool = False
    phrases: Mapping[str, str] = field(default_factory=dict)
    unit: str = ""
    spellings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    caption_words: tuple[str, ...] = ()
    stems: tuple[str, ...] = ()
    neutral: Any = None

    def __post_init__(self) -> None:
        if self.caption_words and len(self.caption_words) != len(self.values):
            raise ValueError(f"{self.name}: {len(self.caption_words)} caption words for {len(self.values)} values")

    @property
    def named(self) -> bool:
        """Whether values are names (stored as indices) rather than numbers (stored as themselves)."""
        return bool(self.values) and isinstance(self.values[0], str)

    def value_name(self, stored: Any) -> str:
        """A stored value as written in text: ``red`` for colour index 1, ``45`` for angle 45."""
        if self.named:
            index = int(stored)
            if not 0 <= index < len(self.values):
                raise UserInputError(f"{self.name} index {index} out of range 0-{len(self.values) - 1}")
            return str(self.values[index])
        return str(int(stored)) if float(stored).is_integer() else str(stored)

    def stored(self, value: Any) -> Any:
        """The stored form of a value given by name (or already stored)."""
        if self.named and isinstance(value, str):
            if value not in self.values:
                raise UserInputError(f"unknown {self.name} {value!r}; expected one of {list(self.values)}")
            return self.values.index(value)
        return value

    @property
    def typical_stored(self) -> Any:
        """The typical value in stored form (``None`` when the factor has none)."""
        return None if self.typical is None else self.stored(self.typical)

    def phrase(self, stored: Any) -> str:
        name = self.value_name(stored)
        return self.phrases.get(name, name)

    @property
    def caption_vocabulary(self) -> list[str]:
        """The distinct caption words of the values, in value order (``["tilted right", "upright", ...]``)."""
        return list(dict.fromkeys(self.caption_words or map(str, self.values)))


@dataclass(frozen=True)
class DatasetFacts:
    """The fact sheet of a generated dataset: classes, the class attribute and the factors of variation.

    Args:
        name: the dataset's name (``cmnist``), as benchmarks and sources are named.
        classes: class names, in label order.
        class_attribute: the attribute key that holds the class (``digit``).
        object_word: how a sentence names the thing shown (``digit``, ``object``).
        factors: every other factor of variation, in the renderer's attribute order.
        caption_template: the sheet's caption of an image (``str.format`` over value phrases and class name).
        cause: the factor a planted bias ties to the class (``None`` when errors have their own causes).
        class_words: the word of each class in the small CLIP's training captions (default the class names).
    """

    name: str
    classes: tuple[str, ...]
    class_attribute: str
    object_word: str
    factors: tuple[Factor, ...]
    caption_template: str = ""
    cause: str | None = None
    class_words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cause is not None and self.cause not in self.factor_names:
            raise ValueError(f"{self.name}: cause {self.cause!r} is not a factor of {self.factor_names}")
        if self.class_words and len(self.class_words) != len(self.classes):
            raise ValueError(f"{self.name}: {len(self.class_words)} class words for {len(self.classes)} classes")

    def factor(self, name: str) -> Factor:
        for factor in self.factors:
            if factor.name == name:
                return factor
        raise UserInputError(f"{self.name} has no factor {name!r}; its factors: {self.factor_names}")

    @property
    def factor_names(self) -> list[str]:
        return [f.name for f in self.factors]

    @property
    def editable(self) -> list[str]:
        """Factors a counterfactual edit may change."""
        return [f.name for f in self.factors if f.editable]

    @property
    def distractors(self) -> list[str]:
        return [f.name for f in self.factors if f.distractor]

    @property
    def caption_words(self) -> dict[str, list[str]]:
        """``{attribute: words}`` of the small CLIP's captions: the class words, then each factor's distinct
        caption words (:attr:`Factor.caption_vocabulary`), keyed by attribute name."""
        words = {self.class_attribute: list(self.class_words or self.classes)}
        return words | {f.name: f.caption_vocabulary for f in self.factors}

    @property
    def vocabulary(self) -> dict[str, list]:
        """``{factor: values}`` plus the class attribute (the renderer's ``attributes`` layout)."""
        return {self.class_attribute: list(range(len(self.classes))), **{f.name: list(f.values) for f in self.factors}}

    def value_names(self, attrs: Mapping[str, Any]) -> dict[str, str]:
        """Every known attribute of an image as text: ``{"digit": "3", "color": "red", "angle": "45", ...}``."""
        out = {}
        if self.class_attribute in attrs:
            out[self.class_attribute] = self.classes[int(attrs[self.class_attribute])]
        for factor in self.factors:
            if factor.name in attrs:
                out[factor.name] = factor.value_name(attrs[factor.name])
        return out

    def caption(self, attrs: Mapping[str, Any]) -> str:
        """A caption of an image from its attributes, by :attr:`caption_template` (``str.format`` over the
        value phrases and the class name)."""
        words = {f.name: f.phrase(attrs[f.name]) for f in self.factors if f.name in attrs}
        words[self.class_attribute] = self.classes[int(attrs[self.class_attribute])]
        return self.caption_template.format(**words)
