"""Reads an explanation against one image's known attributes: which factors it blames, what it asserts.

:class:`ClaimParser` is the rule-based reader behind the offline grounded judge. It works on a dataset fact
sheet (:class:`~datamodules.facts.DatasetFacts`) and never guesses meaning beyond these rules (the grading
rubric they serve is written in docs/GRADING.md):

* The text is cut at ``Edit:``. The text's factors are :attr:`Reading.blamed`; the edit's are
  :attr:`Reading.edit_blamed` (``Edit: style -> solid`` or ``Edit: change the style to solid``), and an edit
  that changes a factor the text does not blame makes the reading inconsistent (:attr:`Reading.consistent`),
  which scores 0. A text that blames nothing is read through its edit (:attr:`Reading.blamed_by_edit`).
  Values the edit asserts about the image (``change the red colour to white``: red) are checked too.
* A factor is mentioned by its name, word or a synonym (whole words, any case), or by one of its value
  names or another spelling of one on the sheet (``metallic`` says ``metal``), counted as below. A number
  names a numeric factor only next to one of the factor's words: ``rotated 45 degrees``, ``rotation of -45``.
* A value name that is an ordinary English word (``plain``, ``left``, ``solid``, ``outline``; see
  :data:`COMMON_WORDS`), or that several factors share, or that is a class name, counts only near a word of
  its factor (at most :data:`WINDOW` tokens apart in the same sentence) or right before the object word, a
  class name or ``one`` (``a solid 0``, ``the small digit``). Other value names count anywhere.
* A carrier word (``strokes``, ``ink``, ``drawn``, ``texture``, ``surface`` ...: :data:`CARRIERS`) names its
  factor only when no other factor is mentioned within :data:`WINDOW` tokens of it in its clause: in
  ``the red strokes`` the strokes carry the colour and blame no stroke style.
* A negated mention blames nothing: ``not the colour but the rotation`` blames the rotation,
  ``the colour did not matter`` nothing (:meth:`~nemo_train.scoring.clauses.Sentence.negated`). A hedge
  (``may``, ``perhaps``, ``either ... or``) still blames every factor it names: ``the colour or the
  rotation`` blames two.
* When some sentence assigns blame (a cue such as ``because``, ``caused``, ``misled``: see
  :data:`~nemo_train.scoring.clauses.BLAME_CUES`) and names a factor, only such sentences blame; the others
  describe the image (their claims are still checked). Otherwise every sentence blames what it names.
* A counted value is a claim about the image unless it sits in a counterfactual or negated stretch of its
  clause (from ``if``, ``would``, ``were``, ``instead``, ``than``, ``training``, ``not``, ``unlike`` ... to the
  clause end; see :data:`HEDGES`; a clause with ``would have`` and one opened by ``Had`` / ``Were`` is hedged
  whole) or right after ``to`` / ``into`` (the target of a change).
* Class claims: ``this <class>`` (true class); ``as (a|an|the) <class>`` and, after *mistaken / mistook /
  taken / confused*, ``for (a|an) <class>`` (predicted class); ``a|an|the|that <class>`` followed in its
  clause by a reading verb (*read, called, classified, labelled, seen ...*) (true class). Class names are
  the fact sheet's classes plus the item's two labels, matched as whole tokens.
* Angles follow the renderers' convention (:mod:`datamodules.shifts_render`, :func:`datamodules.base.rotate_batch`):
  a positive angle turns the object anticlockwise. ``clockwise`` or ``to the right`` in the number's clause
  makes it negative, ``anticlockwise`` / ``counterclockwise`` / ``to the left`` positive, and an angle with
  neither (``tilted 45 degrees``) claims only its size. A number holds within half the smallest gap between
  the factor's values (22.5 degrees on shifts, 2.5 on CMNIST): ``about 40 degrees`` is true of 45 on shifts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from datamodules.facts import DatasetFacts, Factor
from nemo_train.scoring.claims import Claim, Reading, split_edit
from nemo_train.scoring.clauses import COMMON_WORDS, HEDGES, WINDOW, Sentence, phrase, sentences, tokenize

__all__ = [
    "CARRIERS",
    "COMMON_WORDS",
    "HEDGES",
    "WINDOW",
    "Claim",
    "ClaimParser",
    "Reading",
    "split_edit",
    "tokenize",
]

#: Words that carry another factor's value as often as they name their own (``red strokes``, ``stroke colour``).
CARRIERS = frozenset(
    "stroke strokes ink drawn rendering rendered painted pattern texture textured surface finish look".split()
)
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
_CLOCKWISE = {"clockwise": -1, "anticlockwise": 1, "counterclockwise": 1, "right": -1, "left": 1}


@dataclass(frozen=True)
class _Mention:
    """One mention of a factor: where, the value said (``None``: the factor only), whether it is asserted,
    negated, a carrier word, and how a number is read (``tolerance``, ``unsigned``)."""

    start: int
    end: int
    factor: str
    said: str | None = None
    asserted: bool = False
    carrier: bool = False
    negated: bool = False
    tolerance: float = 0.0
    unsigned: bool = False


class ClaimParser:
    """Reads explanations against a fact sheet (or, with ``facts=None``, only class claims)."""

    def __init__(self, facts: DatasetFacts | None = None) -> None:
        self.facts = facts
        factors = facts.factors if facts is not None else ()
        self._words = {f.name: {p for w in (f.name, f.word, *f.synonyms) if (p := phrase(w))} for f in factors}
        owners: dict[tuple[str, ...], list[str]] = {}
        self._said: dict[tuple[tuple[str, ...], str], str] = {}  # (words, factor) -> the value they name
        for factor in (f for f in factors if f.named):
            for value in map(str, factor.values):
                for words in filter(None, map(phrase, (value, *factor.spellings.get(value, ())))):
                    if factor.name not in owners.setdefault(words, []):
                        owners[words].append(factor.name)
                    self._said[words, factor.name] = " ".join(phrase(value))
        self._owners = owners
        self._classes = set(filter(None, map(phrase, facts.classes if facts is not None else ())))
        self._object = phrase(facts.object_word)[-1:] if facts is not None and facts.object_word else ()
        self._tolerance = {f.name: _half_gap(f.values) for f in factors if not f.named}

    def factor_of(self, name: str) -> Factor | None:
        """The factor a name, word or synonym refers to (``colour`` -> ``color``), or ``None``."""
        words = phrase(name)
        for factor in self.facts.factors if self.facts is not None else ():
            if words in self._words[factor.name]:
                return factor
        return None

    def read(
        self,
        explanation: str,
        attributes: Mapping[str, str] | None = None,
        true_label: str = "",
        predicted_label: str = "",
    ) -> Reading:
        """Blamed factors, the edit's factors and the checkable claims of one explanation about one image."""
        sentence_text, edit = split_edit(explanation or "")
        attributes = dict(attributes or {})
        labels = {"true class": str(true_label).strip(), "predicted class": str(predicted_label).strip()}
        classes = self._classes | set(filter(None, map(phrase, labels.values())))
        claims: list[Claim] = []
        cued: list[str] = []
        named: list[str] = []
        for sentence in sentences(sentence_text):
            for subject, said in self._class_claims(sentence, classes):
                if labels[subject]:
                    claims.append(Claim(subject, said, labels[subject]))
            mentions = self._mentions(sentence, classes)
            claims += self._claims(mentions, attributes)
            blamed = [m.factor for m in mentions if not m.negated]
            named += blamed
            cued += blamed if sentence.blames else []
        text_blamed = list(dict.fromkeys(cued or named))
        edit_blamed: list[str] = []
        if edit:
            edit_blamed, edit_claims = self._edit(edit, classes, attributes)
            claims += edit_claims
        by_edit = not text_blamed and bool(edit_blamed)
        blamed = text_blamed or edit_blamed
        factors = tuple(self.facts.factor_names) if self.facts is not None else ()
        return Reading(tuple(blamed), tuple(claims), by_edit, tuple(edit_blamed), factors)

    def _claims(self, mentions: Sequence[_Mention], attributes: Mapping[str, str]) -> list[Claim]:
        return [
            Claim(m.factor, m.said, str(attributes[m.factor]), m.tolerance, m.unsigned)
            for m in mentions
            if m.asserted and m.said is not None and attributes.get(m.factor) is not None
        ]

    def _edit(
        self, body: str, classes: set[tuple[str, ...]], attributes: Mapping[str, str]
    ) -> tuple[list[str], list[Claim]]:
        """The factors an edit changes (``attribute -> value`` or free text) and the values it asserts."""
        found, claims = [], []
        for part in body.replace("\n", ";").split(";"):
            attribute = part.split("->")[0] if "->" in part else None
            factor = self.factor_of(attribute) if attribute is not None else None
            if factor is not None:
                found.append(factor.name)
                continue
            for sentence in sentences(part):
                mentions = self._mentions(sentence, classes)
                found += [m.factor for m in mentions if not m.negated]
                claims += self._claims(mentions, attributes)
        return list(dict.fromkeys(found)), claims

    def _class_claims(self, s: Sentence, classes: set[tuple[str, ...]]) -> list[tuple[str, str]]:
        """``(subject, class as written)`` for every asserted class claim; class tokens are marked used."""
        found: list[tuple[int, str, str]] = []
        for words in sorted(classes, key=len, reverse=True):
            for i in s.find(words):
                span = set(range(i, i + len(words)))
                if span & s.used:
                    continue
                role = self._class_role(s, i, len(words))
                if role is None:
                    continue
                s.used |= span
                if not s.hedged[i]:
                    found.append((i, role, " ".join(words)))
        return [(role, said) for _, role, said in sorted(found)]

    @staticmethod
    def _class_role(s: Sentence, i: int, n: int) -> str | None:
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

    def _mentions(self, s: Sentence, classes: set[tuple[str, ...]]) -> list[_Mention]:
        """Every mention of a factor in ``s`` (words, values, numbers), in order, carriers resolved, negation read."""
        words = {name: [(i, i + len(p)) for p in phrases for i in s.find(p)] for name, phrases in self._words.items()}
        found: list[_Mention] = []
        for name, spans in words.items():
            found += [_Mention(a, b, name, carrier=" ".join(s.tokens[k].text for k in range(a, b)) in CARRIERS)
                      for a, b in spans]  # fmt: skip
        for words_ in sorted(self._owners, key=len, reverse=True):
            for i in s.find(words_):
                span = set(range(i, i + len(words_)))
                if span & s.used:
                    continue
                factor = self._value_owner(s, i, words_, words, classes)
                if factor is not None:
                    s.used |= span
                    found.append(
                        _Mention(i, i + len(words_), factor, self._said[words_, factor], s.asserted(i, _TARGETS))
                    )
        for i, token in enumerate(s.tokens):
            if token.kind != "num" or i in s.used:
                continue
            if (token.text,) in classes and s.text(i - 1) in _DETERMINERS:
                continue  # "the 2 leans 45 degrees": the 2 is the class, not an angle
            for factor in self.facts.factors if self.facts is not None else ():
                if not factor.named and self._number_of(s, i, words[factor.name]):
                    s.used.add(i)
                    found.append(self._number(s, i, factor.name))
                    break
        found.sort(key=lambda m: m.start)
        kept = [m for m in found if not m.carrier or not self._carries(s, m, found)]
        objects = {*self._object, *(f"{w}s" for w in self._object), *(" ".join(c) for c in classes)}
        out = []
        for m in kept:
            own = {k for other in kept if other.factor == m.factor for k in range(other.start, other.end)}
            negated = s.negated(m.start, m.end, own, objects)
            asserted = m.asserted and not negated
            out.append(
                _Mention(m.start, m.end, m.factor, m.said, asserted, m.carrier, negated, m.tolerance, m.unsigned)
            )
        return out

    @staticmethod
    def _carries(s: Sentence, m: _Mention, found: Sequence[_Mention]) -> bool:
        """Whether another factor's mention near the carrier word ``m`` (same clause) takes it over."""
        return any(
            o.factor != m.factor
            and s.clause[o.start] == s.clause[m.start]
            and max(o.start - m.end + 1, m.start - o.end + 1) <= WINDOW
            for o in found
            if not o.carrier
        )

    def _number(self, s: Sentence, i: int, factor: str) -> _Mention:
        """A number of a numeric factor: signed by a direction word in its clause, else only its size."""
        value = float(s.text(i))
        direction = 0
        for k in range(max(0, i - 4), min(len(s.tokens), i + 7)):
            word = s.text(k)
            if s.clause[k] == s.clause[i] and word in _CLOCKWISE:
                if word in ("left", "right") and s.text(k - 1) not in ("the", "to"):
                    continue
                direction = -_CLOCKWISE[word] if s.text(k - 1) in ("counter", "anti") else _CLOCKWISE[word]
                break
        unsigned = direction == 0 and value >= 0 and not s.text(i).startswith("+")
        said = abs(value) * direction if direction and value >= 0 else value
        text = str(int(said)) if float(said).is_integer() else str(said)
        return _Mention(
            i, i + 1, factor, text, s.asserted(i, _TARGETS), tolerance=self._tolerance[factor], unsigned=unsigned
        )

    def _value_owner(
        self,
        s: Sentence,
        i: int,
        words_: tuple[str, ...],
        words: Mapping[str, Sequence[tuple[int, int]]],
        classes: set[tuple[str, ...]],
    ) -> str | None:
        """The factor a value mention at ``i`` names, or ``None`` when it does not count (see module doc)."""
        owners = self._owners[words_]
        ambiguous = (
            len(owners) > 1
            or " ".join(words_) in COMMON_WORDS
            or words_ in classes
            or any(words_ in w for w in self._words.values())
        )
        if not ambiguous:
            return owners[0]
        end = i + len(words_)
        near = [f for f in owners if any(max(a - end + 1, i - b + 1) <= WINDOW for a, b in words[f])]
        if len(near) == 1:
            return near[0]
        following = s.text(i + len(words_))
        objects = {"one", "ones", *self._object, *(f"{w}s" for w in self._object)}
        if len(owners) == 1 and (following in objects or (following,) in classes):
            return owners[0]
        return None

    @staticmethod
    def _number_of(s: Sentence, i: int, spans: Sequence[tuple[int, int]]) -> bool:
        """Whether the number at ``i`` belongs to a factor word at one of ``spans`` (see module doc)."""
        for a, b in spans:
            if b <= i <= b + WINDOW and all(s.text(j) in _AFTER_FACTOR for j in range(b, i)):
                return True
            if i < a <= i + 1 + WINDOW and all(s.text(j) in _BEFORE_FACTOR for j in range(i + 1, a)):
                return True
        return False


def _half_gap(values: Sequence) -> float:
    """Half the smallest gap between a numeric factor's values (0 for fewer than two)."""
    ordered = sorted(float(v) for v in values)
    gaps = [b - a for a, b in zip(ordered, ordered[1:]) if b > a]
    return min(gaps) / 2 if gaps else 0.0
