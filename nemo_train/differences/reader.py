"""A closed-vocabulary reader of explanations: sentences -> (which model is better, on which conditions).

This is a keyword stand-in for the evaluator language model, not a model. It reads clauses such as
"Model A is worse than model B when the digits of 0, 1, 2, 3, and 4 are not colored in red regardless
of the rotation angle": the subject ("Model A" / "Model B", carried over to following clauses), a
direction word (better, excels, outperforms ... / worse, struggles, fails ...), and attribute values of
the generator's vocabulary (digit numbers and ranges, colour / material / shape / size names and their
plurals, angles "-10 degrees" or "from -30 to 0 degrees"). A value is negated when it follows "not",
"other than", "except", "no", "non" (the negation runs on through a list "red, green or blue"); clauses
that say both models are equal, or name no value, are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nemo_train.differences.conditions import Attribute, AttributeSpace, Condition

_SENTENCES = re.compile(r"\.(?=\s|$)|[;\n]")
_CLAUSES = re.compile(
    r"(?:,\s*|\s+)(?:but|while|whereas|however|although|conversely|meanwhile|in contrast)\s+|,\s*(?=it\s)"
)
#: qualifiers that narrow a statement ("excels with rubber, especially large spheres"): the statement is
#: read without them
_QUALIFIER = re.compile(r",?\s+(?:especially|particularly|notably|mainly|mostly|such as|e\.g\.)\b.*$")
_SUBJECT = re.compile(r"\bmodel\s+([ab])\b|^\s*(?:while\s+)?([ab])\s+(?=\w+s\b)")
_POSITIVE = re.compile(
    r"\b(better|excel\w*|outperform\w*|well|strong\w*|higher|superior|succeed\w*|advantage|edge|beat\w*|"
    r"more accurate|favou?r\w*|wins?)\b"
)
_NEGATIVE = re.compile(
    r"\b(worse|struggl\w*|fail\w*|underperform\w*|poor\w*|weak\w*|falter\w*|lower|drops?|inferior|"
    r"less accurate|trouble|loses?|errs?)\b"
)
_EQUAL = re.compile(r"\b(equal\w*|similar\w*|same|no difference|comparabl\w*|both models?|tie)\b")
_NEGATION = re.compile(r"\b(not|no|non|other than|except|excluding|besides|apart from|never)\b|n't\b")
_LIST_GLUE = re.compile(r"^(?:[\s,/-]|\b(?:or|and|nor|the|in|of|any|colou?r\w*|digits?|shapes?|sizes?|materials?)\b)*$")
_NUMBER = re.compile(r"(?<![\w.+%-])(\d+)(?![\w.%]|\s*(?:degrees?|°|%|percent))")
_RANGE = re.compile(r"(?<![\w.+-])(\d+)\s*(?:-|–|to|through)\s*(\d+)(?![\w.%]|\s*(?:degrees?|°|%))")
_UNIT_RANGE = "(?:from|between)\\s+(-?\\d+)\\s*(?:{unit})?\\s+(?:to|and)\\s+(-?\\d+)\\s*(?:{unit})"
_UNIT_VALUE = "(?<![\\w.])(-?\\d+)\\s*(?:{unit})"


@dataclass
class Clause:
    """One statement: ``direction`` +1 (model A better) / -1 (model B better); ``allowed`` and
    ``excluded`` value sets per attribute."""

    direction: int
    allowed: dict[str, set] = field(default_factory=dict)
    excluded: dict[str, set] = field(default_factory=dict)
    text: str = ""

    def misses(self, values: dict[str, Any]) -> int:
        """How many of this clause's constraints ``values`` violates."""
        missed = sum(1 for name, vals in self.allowed.items() if values[name] not in vals)
        return missed + sum(1 for name, vals in self.excluded.items() if values[name] in vals)

    @property
    def num_constraints(self) -> int:
        return len(self.allowed) + len(self.excluded)


def _forms(attribute: Attribute, value: Any) -> list[str]:
    base = [str(value), *attribute.synonyms.get(value, ())]
    return [f for b in base for f in (b, b + "s", b + "es")]


def _mentions(clause: str, attribute: Attribute) -> list[tuple[int, int, Any]]:
    """``(start, end, value)`` of every mention of a value of ``attribute`` in ``clause``."""
    found: list[tuple[int, int, Any]] = []
    if attribute.ordinal and attribute.unit:
        unit = re.escape(attribute.unit.rstrip("s")) + "s?|°"
        taken = []
        for m in re.finditer(_UNIT_RANGE.format(unit=unit), clause):
            lo, hi = sorted((int(m.group(1)), int(m.group(2))))
            found += [(m.start(), m.end(), v) for v in attribute.values if lo <= v <= hi]
            taken.append((m.start(), m.end()))
        for m in re.finditer(_UNIT_VALUE.format(unit=unit), clause):
            if not any(s <= m.start() < e for s, e in taken) and int(m.group(1)) in attribute.values:
                found.append((m.start(), m.end(), int(m.group(1))))
    elif attribute.ordinal:
        taken = []
        for m in _RANGE.finditer(clause):
            lo, hi = sorted((int(m.group(1)), int(m.group(2))))
            if lo in attribute.values and hi in attribute.values:
                found += [(m.start(), m.end(), v) for v in attribute.values if lo <= v <= hi]
                taken.append((m.start(), m.end()))
        for m in _NUMBER.finditer(clause):
            if not any(s <= m.start() < e for s, e in taken) and int(m.group(1)) in attribute.values:
                found.append((m.start(), m.end(), int(m.group(1))))
    else:
        for value in attribute.values:
            pattern = r"\b(?:" + "|".join(re.escape(f) for f in _forms(attribute, value)) + r")\b"
            found += [(m.start(), m.end(), value) for m in re.finditer(pattern, clause)]
    return sorted(found, key=lambda t: t[0])


def _negated(clause: str, mentions: list[tuple[int, int, Any]]) -> list[bool]:
    """Whether each mention is negated: a negation cue at most four words before it in the same comma-free
    stretch, or a negated mention of the same attribute before it joined only by list words ("not red,
    green or blue")."""
    flags: list[bool] = []
    for i, (start, _, _) in enumerate(mentions):
        before = re.split(r"[,;:]", clause[max(0, start - 40) : start])[-1]  # a cue does not reach past a comma
        words = before.split()[-4:]
        negated = bool(_NEGATION.search(" ".join(words)))
        if not negated and i and flags[i - 1] and _LIST_GLUE.match(clause[mentions[i - 1][1] : start]):
            negated = True
        flags.append(negated)
    return flags


def _direction(clause: str, subject: str) -> int:
    positive, negative = _POSITIVE.search(clause), _NEGATIVE.search(clause)
    first = min((m for m in (positive, negative) if m), key=lambda m: m.start(), default=None)
    if first is None:
        return 0
    sign = 1 if first is positive else -1
    if re.search(r"\b(not|never)\s+(?:\w+\s+)?$|n't\s+(?:\w+\s+)?$", clause[: first.start()]):
        sign = -sign
    return sign if subject == "a" else -sign


def read_explanation(text: str, space: AttributeSpace) -> list[Clause]:
    """The clauses of ``text`` that say which model is better on which attribute values."""
    clauses: list[Clause] = []
    subject = None
    for sentence in _SENTENCES.split(text.lower()):
        for part in _CLAUSES.split(sentence):
            part = _QUALIFIER.sub("", part)
            if not part.strip():
                continue
            match = _SUBJECT.search(part)
            if match:
                subject = match.group(1) or match.group(2)
            if subject is None or _EQUAL.search(part):
                continue
            direction = _direction(part[match.end() if match else 0 :], subject)
            if direction == 0:
                continue
            clause = Clause(direction, text=part.strip())
            for attribute in space.attributes:
                mentions = _mentions(part, attribute)
                for (_, _, value), negated in zip(mentions, _negated(part, mentions)):
                    (clause.excluded if negated else clause.allowed).setdefault(attribute.name, set()).add(value)
            for name in list(clause.excluded):
                if name in clause.allowed:  # "digits 0-4 ... other than 3": keep the allowed set
                    clause.allowed[name] -= clause.excluded.pop(name)
            if clause.num_constraints:
                clauses.append(clause)
    return clauses


def predict_difference(clauses: list[Clause], condition: Condition) -> int:
    """+1 (model A better), -1 (model B better) or 0 (cannot be determined) for ``condition``.

    Clauses whose every constraint holds vote with their direction. When none holds, clauses that
    describe single observations (three or more constraints, i.e. a row of a results list) and miss
    the condition in exactly one attribute vote instead: how a reader generalises a listed result
    to a neighbouring condition. A tie is 0.
    """
    values = condition.values
    votes = [c.direction for c in clauses if c.misses(values) == 0]
    if not votes:
        votes = [c.direction for c in clauses if c.num_constraints >= 3 and c.misses(values) == 1]
    total = sum(votes)
    return (total > 0) - (total < 0)
