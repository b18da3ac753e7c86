"""Reads an explanation against one image's known attributes: which factors it blames, what it asserts.

:class:`ClaimParser` is the rule-based reader behind the offline grounded judge. It works on a dataset fact
sheet (:class:`~datamodules.facts.DatasetFacts`) and never guesses meaning beyond these rules:

* The text is cut at ``Edit:``; claims come only from the part before it. The edit names the blamed factor
  only when the sentence blames none (``Edit: style -> solid`` blames ``style``).
* A factor is blamed when its name, word or a synonym appears (whole words, any case, negations included),
  or when one of its value names, or another spelling of one on the sheet (``metallic`` says ``metal``),
  counts as a mention (below). A number names a numeric factor only next to one of the factor's words:
  ``rotated 45 degrees``, ``rotation of -45``, ``45 degree rotation``.
* A value name that is an ordinary English word (``plain``, ``normal``, ``left``, ``solid``; see
  :data:`COMMON_WORDS`), or that several factors share, or that is a class name, counts only near a word of
  its factor (at most :data:`WINDOW` tokens apart in the same sentence) or right before the object word, a
  class name or ``one`` (``a solid 0``, ``the small digit``). Other value names count anywhere.
* A counted value is a claim about the image unless it sits in a counterfactual or negated stretch of its
  clause (from ``if``, ``would``, ``were``, ``instead``, ``than``, ``training``, ``not`` ... to the clause
  end; see :data:`HEDGES`) or right after ``to`` / ``into`` (the target of a change). Clauses end at commas,
  sentence marks and conjunctions (``and``, ``but``, ``so``, ``because`` ...).
* Class claims: ``this <class>`` (true class); ``as (a|an|the) <class>`` and, after *mistaken / mistook /
  taken / confused*, ``for (a|an) <class>`` (predicted class); ``a|an|the|that <class>`` followed in its
  clause by a reading verb (*read, called, classified, labelled, seen ...*) (true class). Class names are
  the fact sheet's classes plus the item's two labels, matched as whole tokens (``45`` is not ``4``,
  ``8s`` is not ``8``, ``has`` is not ``as``).
* An unsigned angle is positive: ``rotated 45 degrees`` claims +45.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from datamodules.facts import DatasetFacts, Factor
from nemo_train.backends.jsonparse import extract_json

__all__ = ["COMMON_WORDS", "HEDGES", "WINDOW", "Claim", "ClaimParser", "Reading", "split_edit", "tokenize"]

#: Value names that are ordinary words; they count only in a factor's context.
COMMON_WORDS = frozenset(
    "plain normal left right center centre middle solid small large big none regular standard default light "
    "dark thin thick top bottom up down full empty simple clean high low medium upright flat round straight "
    "open closed even fine natural original usual same other new old real soft hard smooth".split()
)
#: Words after which, to the end of the clause, nothing is a claim about the image.
HEDGES = frozenset(
    "if unless were would could should might may instead rather than otherwise training trained train usually "
    "typically normally expected correctly correct not no never nor without".split()
)
#: How many tokens apart a common-word value and its factor's word may be.
WINDOW = 3

_CONJUNCTIONS = frozenset("and but so because while whereas although though since yet or".split())
_TARGETS = frozenset(["to", "into", "towards", "toward", "->"])
_ARTICLES = frozenset(["a", "an", "the"])
_DETERMINERS = frozenset(["a", "an", "the", "this", "that"])
_READ_VERBS = frozenset(
    "read reads called calls classified classifies labelled labeled labels predicted seen recognised recognized "
    "identified misread misclassified mistaken mistook taken confused interpreted".split()
)
_MISTAKE_VERBS = frozenset(["mistaken", "mistook", "taken", "confused", "mistakes", "mistake"])
_AFTER_FACTOR = frozenset(
    "by of at is was about around roughly approximately nearly almost some a an only just exactly".split()
)
_BEFORE_FACTOR = frozenset(["degree", "degrees", "deg", "°", "of"])
_SENTENCE_ENDS = frozenset(".;:!?")
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])-?\d+(?:\.\d+)?(?!\w|\.\d))|(?P<word>[^\W_]+(?:'[^\W_]+)*)|(?P<mark>->|°|[.;:!?,])"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_EDIT = re.compile(r"\bedit:", re.IGNORECASE)
_ATTRIBUTE_EDIT = re.compile(r"^\s*(?P<attribute>[\w ]+?)\s*->\s*(?P<value>.+?)\s*\.?\s*$", re.S)


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is ``num``, ``word`` or ``mark``; ``text`` is lower-cased."""

    kind: str
    text: str


def tokenize(text: str) -> list[Token]:
    """Words, signed numbers and marks of ``text`` (lower-cased; a possessive ``'s`` dropped)."""
    text = text.replace("\u2019", "'").replace("\u2212", "-")
    out = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "mark"
        word = match.group(0).lower()
        if kind == "word" and word.endswith("'s"):
            word = word[:-2]
        out.append(Token(kind, word))
    return out


def _phrase(text: str) -> tuple[str, ...]:
    return tuple(t.text for t in tokenize(str(text).replace("_", " ")))


def split_edit(text: str) -> tuple[str, str | None]:
    """``(sentence, edit body)`` of an explanation (JSON ``cause_of_error`` read first); body ``None`` if no edit."""
    if "{" in text:
        parsed = extract_json(text)
        if isinstance(parsed, dict) and isinstance(parsed.get("cause_of_error"), str):
            text = parsed["cause_of_error"]
    match = _EDIT.search(text)
    if match is None:
        return text, None
    return text[: match.start()], text[match.end() :].strip()


@dataclass(frozen=True)
class Claim:
    """One checkable statement about the image: ``subject`` (a factor or ``true class`` / ``predicted class``)
    is ``said``; the image has ``actual``."""

    subject: str
    said: str
    actual: str

    @property
    def holds(self) -> bool:
        if _NUMBER.fullmatch(self.said) and _NUMBER.fullmatch(self.actual.strip()):
            return math.isclose(float(self.said), float(self.actual), abs_tol=1e-6)
        return _phrase(self.said) == _phrase(self.actual)

    def __str__(self) -> str:
        return f"{self.subject} {self.said!r} (image: {self.actual!r})"


@dataclass(frozen=True)
class Reading:
    """What an explanation blames (factor names, first mention first) and its checkable claims."""

    blamed: tuple[str, ...]
    claims: tuple[Claim, ...] = ()
    blamed_by_edit: bool = False

    @property
    def false_claims(self) -> list[Claim]:
        return [c for c in self.claims if not c.holds]

    @property
    def grounding(self) -> float | None:
        """Share of checkable claims that are true; ``None`` when there is none."""
        if not self.claims:
            return None
        return sum(c.holds for c in self.claims) / len(self.claims)

    def match(self, cause: str) -> tuple[float, str]:
        """LLM Match against ``cause`` with a reason: 1 if it is the only blamed factor, 0.5 if one of
        several, 0 if not blamed or if any claim is false."""
        blamed = ", ".join(self.blamed) or "nothing"
        how = " (by its edit)" if self.blamed_by_edit else ""
        if cause not in self.blamed:
            score, reason = 0.0, f"blames {blamed}{how}, not the cause {cause}"
        elif len(self.blamed) == 1:
            score, reason = 1.0, f"blames the cause {cause}{how}"
        else:
            score, reason = 0.5, f"blames the cause {cause} among others: {blamed}"
        return (0.0 if self.false_claims else score), reason

    def claims_note(self) -> str:
        """``; false claims: ...; 1/3 checkable claims true`` (or ``; no checkable claim``)."""
        false = self.false_claims
        note = "; false claims: " + ", ".join(str(c) for c in false) if false else ""
        if not self.claims:
            return note + "; no checkable claim"
        return note + f"; {len(self.claims) - len(false)}/{len(self.claims)} checkable claims true"


@dataclass
class _Sentence:
    """A sentence's tokens with, per token, its clause number and whether it is hedged."""

    tokens: list[Token]
    clause: list[int] = field(default_factory=list)
    hedged: list[bool] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        clause, hedged = 0, False
        for token in self.tokens:
            if token.text == "," or token.text in _CONJUNCTIONS:
                clause, hedged = clause + 1, False
            elif token.text in HEDGES or token.text.endswith("n't"):
                hedged = True
            self.clause.append(clause)
            self.hedged.append(hedged)

    def find(self, phrase: tuple[str, ...]) -> Iterable[int]:
        n = len(phrase)
        for i in range(len(self.tokens) - n + 1):
            if all(self.tokens[i + k].text == phrase[k] for k in range(n)):
                yield i

    def text(self, i: int) -> str:
        return self.tokens[i].text if 0 <= i < len(self.tokens) else ""

    def asserted(self, i: int) -> bool:
        """Whether a mention at ``i`` is stated about the image (not hedged, not a change's target)."""
        return not self.hedged[i] and self.text(i - 1) not in _TARGETS


def _sentences(text: str) -> list[_Sentence]:
    out, current = [], []
    for token in tokenize(text):
        if token.kind == "mark" and token.text in _SENTENCE_ENDS:
            out.append(current)
            current = []
        else:
            current.append(token)
    out.append(current)
    return [_Sentence(tokens) for tokens in out if tokens]


class ClaimParser:
    """Reads explanations against a fact sheet (or, with ``facts=None``, only class claims)."""

    def __init__(self, facts: DatasetFacts | None = None) -> None:
        self.facts = facts
        factors = facts.factors if facts is not None else ()
        self._words = {f.name: {p for w in (f.name, f.word, *f.synonyms) if (p := _phrase(w))} for f in factors}
        owners: dict[tuple[str, ...], list[str]] = {}
        self._said: dict[tuple[tuple[str, ...], str], str] = {}  # (words, factor) -> the value they name
        for factor in (f for f in factors if f.named):
            for value in map(str, factor.values):
                for phrase in filter(None, map(_phrase, (value, *factor.spellings.get(value, ())))):
                    owners.setdefault(phrase, []).append(factor.name)
                    self._said[phrase, factor.name] = " ".join(_phrase(value))
        self._owners = owners
        self._classes = set(filter(None, map(_phrase, facts.classes if facts is not None else ())))
        self._object = _phrase(facts.object_word)[-1:] if facts is not None and facts.object_word else ()

    def factor_of(self, name: str) -> Factor | None:
        """The factor a name, word or synonym refers to (``colour`` -> ``color``), or ``None``."""
        phrase = _phrase(name)
        for factor in self.facts.factors if self.facts is not None else ():
            if phrase in self._words[factor.name]:
                return factor
        return None

    def read(
        self,
        explanation: str,
        attributes: Mapping[str, str] | None = None,
        true_label: str = "",
        predicted_label: str = "",
    ) -> Reading:
        """Blamed factors and checkable claims of one explanation about one image."""
        sentence_text, edit = split_edit(explanation or "")
        attributes = dict(attributes or {})
        labels = {"true class": str(true_label).strip(), "predicted class": str(predicted_label).strip()}
        classes = self._classes | set(filter(None, map(_phrase, labels.values())))
        blamed: list[str] = []
        claims: list[Claim] = []
        for sentence in _sentences(sentence_text):
            for subject, said in self._class_claims(sentence, classes):
                if labels[subject]:
                    claims.append(Claim(subject, said, labels[subject]))
            for factor, said, asserted in self._factor_mentions(sentence, classes):
                if factor not in blamed:
                    blamed.append(factor)
                if asserted and said is not None and attributes.get(factor) is not None:
                    claims.append(Claim(factor, said, str(attributes[factor])))
        by_edit = False
        if not blamed and edit:
            blamed, by_edit = self._edit_factors(edit, classes), True
        return Reading(tuple(blamed), tuple(claims), by_edit and bool(blamed))

    def _edit_factors(self, body: str, classes: set[tuple[str, ...]]) -> list[str]:
        match = _ATTRIBUTE_EDIT.match(body)
        factor = self.factor_of(match.group("attribute")) if match else None
        if factor is not None:
            return [factor.name]
        found: list[str] = []
        for sentence in _sentences(body):
            found += [f for f, _, _ in self._factor_mentions(sentence, classes) if f not in found]
        return found

    def _class_claims(self, s: _Sentence, classes: set[tuple[str, ...]]) -> list[tuple[str, str]]:
        """``(subject, class as written)`` for every asserted class claim; class tokens are marked used."""
        found: list[tuple[int, str, str]] = []
        for phrase in sorted(classes, key=len, reverse=True):
            for i in s.find(phrase):
                span = set(range(i, i + len(phrase)))
                if span & s.used:
                    continue
                role = self._class_role(s, i, len(phrase))
                if role is None:
                    continue
                s.used |= span
                if not s.hedged[i]:
                    found.append((i, role, " ".join(phrase)))
        return [(role, said) for _, role, said in sorted(found)]

    @staticmethod
    def _class_role(s: _Sentence, i: int, n: int) -> str | None:
        before = s.text(i - 1)
        if before == "this":
            return "true class"
        lead = i - 2 if before in _ARTICLES else i - 1
        word = s.text(lead)
        if word == "as" or (word == "for" and any(s.text(k) in _MISTAKE_VERBS for k in range(lead))):
            return "predicted class"
        has_determiner = any(s.text(k) in _DETERMINERS and s.clause[k] == s.clause[i] for k in range(i - 3, i))
        if has_determiner:
            for k in range(i + n, len(s.tokens) - 1):
                if s.clause[k] != s.clause[i]:
                    break
                if s.text(k) in _READ_VERBS and s.text(k + 1) in ("as", "for"):
                    return "true class"
        return None

    def _factor_mentions(self, s: _Sentence, classes: set[tuple[str, ...]]) -> list[tuple[str, str | None, bool]]:
        """``(factor, value said or None, asserted)`` for each word, value or number naming a factor."""
        words = {name: [(i, i + len(p)) for p in phrases for i in s.find(p)] for name, phrases in self._words.items()}
        out: list[tuple[int, str, str | None, bool]] = []
        for name, spans in words.items():
            out += [(i, name, None, False) for i, _ in spans]
        for phrase in sorted(self._owners, key=len, reverse=True):
            for i in s.find(phrase):
                span = set(range(i, i + len(phrase)))
                if span & s.used:
                    continue
                factor = self._value_owner(s, i, phrase, words, classes)
                if factor is not None:
                    s.used |= span
                    out.append((i, factor, self._said[phrase, factor], s.asserted(i)))
        for i, token in enumerate(s.tokens):
            if token.kind != "num" or i in s.used:
                continue
            for factor in self.facts.factors if self.facts is not None else ():
                if not factor.named and self._number_of(s, i, words[factor.name]):
                    s.used.add(i)
                    out.append((i, factor.name, token.text, s.asserted(i)))
                    break
        return [(name, said, asserted) for _, name, said, asserted in sorted(out, key=lambda m: m[0])]

    def _value_owner(
        self,
        s: _Sentence,
        i: int,
        phrase: tuple[str, ...],
        words: Mapping[str, Sequence[tuple[int, int]]],
        classes: set[tuple[str, ...]],
    ) -> str | None:
        """The factor a value mention at ``i`` names, or ``None`` when it does not count (see module doc)."""
        owners = self._owners[phrase]
        ambiguous = (
            len(owners) > 1
            or " ".join(phrase) in COMMON_WORDS
            or phrase in classes
            or any(phrase in w for w in self._words.values())
        )
        if not ambiguous:
            return owners[0]
        end = i + len(phrase)
        near = [f for f in owners if any(max(a - end + 1, i - b + 1) <= WINDOW for a, b in words[f])]
        if len(near) == 1:
            return near[0]
        following = s.text(i + len(phrase))
        objects = {"one", "ones", *self._object, *(f"{w}s" for w in self._object)}
        if len(owners) == 1 and (following in objects or (following,) in classes):
            return owners[0]
        return None

    @staticmethod
    def _number_of(s: _Sentence, i: int, spans: Sequence[tuple[int, int]]) -> bool:
        """Whether the number at ``i`` belongs to a factor word at one of ``spans`` (see module doc)."""
        for a, b in spans:
            if b <= i <= b + WINDOW and all(s.text(j) in _AFTER_FACTOR for j in range(b, i)):
                return True
            if i < a <= i + 1 + WINDOW and all(s.text(j) in _BEFORE_FACTOR for j in range(i + 1, a)):
                return True
        return False
