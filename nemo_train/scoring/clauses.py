"""Tokens, sentences and clauses of an explanation, with the scopes the claim parser reads.

:class:`Sentence` marks, per token, its clause and whether it is hedged (a counterfactual or negated stretch:
nothing in it is a claim about the image), and answers the two questions :mod:`nemo_train.scoring.grounding`
asks of a factor mention: is it negated (``not the colour``, ``the colour did not matter``: the factor is not
blamed), and does its sentence carry a blame cue (``because``, ``caused``, ``misled`` ...)?
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Value names that are ordinary words; they count only in a factor's context.
COMMON_WORDS = frozenset(
    "plain normal left right center centre middle solid small large big none regular standard default light "
    "dark thin thick top bottom up down full empty simple clean high low medium upright flat round straight "
    "open closed even fine natural original usual same other new old real soft hard smooth outline".split()
)
#: Words after which, to the end of the clause, nothing is a claim about the image.
HEDGES = frozenset(
    "if unless were would could should might may instead rather than otherwise training trained train usually "
    "typically normally expected correctly correct not no never nor without unlike reference references".split()
)
#: How many tokens apart a common-word value and its factor's word may be.
WINDOW = 3
#: Words that, just before a factor mention (through :data:`NEGATION_FILLER` words), say it is not to blame.
NEGATORS = frozenset("not no never nor neither rather instead unlike despite regardless nothing".split())
#: Words that may stand between a negator and the factor mention it negates (``not because of its colour``).
NEGATION_FILLER = frozenset(
    "the a an its their this that of by to due because about any with from on in at just only really simply "
    "merely so much caused cause blame be been being is was it it's also even anything problem issue fooled "
    "confused misled affected influenced driven coming come comes slight mere than".split()
)
#: After a factor mention, a negator following these (``the colour does not matter``) negates it.
_AUXILIARIES = frozenset("is was are were does did do has had have plays played can could seems seem 's".split())
#: Words after ``is not`` that make a statement of blame, not a denial (``the colour is not typical``).
_NOT_DENIAL = frozenset(
    "typical usual common normal seen expected standard found present learned something one what like".split()
)
#: Adjectives that, right after a factor mention and its verb, clear it (``the colour is irrelevant``).
_CLEARED = frozenset("irrelevant unrelated innocent harmless fine".split())
#: Words that make a sentence one that assigns blame; mentions elsewhere only describe the image.
BLAME_CUES = frozenset(
    "because due cause caused causes causing reason reasons blame blamed led leads lead made makes make "
    "confused confuses confusing confuse misled misleads mislead misleading fooled fools fool responsible "
    "triggered explains explain explained so therefore hence why relies rely relied associate associates "
    "associated links linked connects connect keys pushed affected matter matters mattered problem culprit "
    "comes come got".split()
)
CONJUNCTIONS = frozenset("and but so because while whereas although though since yet or nor".split())
_MODALS = frozenset(["would", "could", "might", "should"])
_INVERTED = frozenset(["had", "were", "should"])  # "Had it been solid, ...": a counterfactual clause
SENTENCE_ENDS = frozenset(".;:!?")
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])-?\d+(?:\.\d+)?(?!\w|\.\d))|(?P<word>[^\W_]+(?:'[^\W_]+)*)|(?P<mark>->|°|[.;:!?,])"
)


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
        if kind == "word" and word.endswith("'s") and word != "it's":
            word = word[:-2]
        out.append(Token(kind, word))
    return out


def phrase(text: str) -> tuple[str, ...]:
    """The token texts of ``text`` (underscores read as spaces)."""
    return tuple(t.text for t in tokenize(str(text).replace("_", " ")))


def _negator(word: str) -> bool:
    return word in NEGATORS or word.endswith("n't") or word == "cannot"


@dataclass
class Sentence:
    """A sentence's tokens with, per token, its clause number and whether it is hedged."""

    tokens: list[Token]
    clause: list[int] = field(default_factory=list)
    hedged: list[bool] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        clause, hedged = 0, False
        for k, token in enumerate(self.tokens):
            after_negator = k > 0 and _negator(self.tokens[k - 1].text)  # "not because of": one clause
            if token.text == "," or (token.text in CONJUNCTIONS and not after_negator):
                clause, hedged = clause + 1, False
            elif token.text in HEDGES or token.text.endswith("n't"):
                hedged = True
            if token.text in _INVERTED and (k == 0 or self.tokens[k - 1].text == ","):
                hedged = True  # "Had the 7 been solid", "Were it white"
            self.clause.append(clause)
            self.hedged.append(hedged)
        for k, token in enumerate(self.tokens):  # "on a plain background it would have been read": all hedged
            if token.text in _MODALS and self.text(k + 1) == "have":
                for j, c in enumerate(self.clause):
                    self.hedged[j] = self.hedged[j] or c == self.clause[k]

    def find(self, words: tuple[str, ...]) -> Iterable[int]:
        n = len(words)
        for i in range(len(self.tokens) - n + 1):
            if all(self.tokens[i + k].text == words[k] for k in range(n)):
                yield i

    def text(self, i: int) -> str:
        return self.tokens[i].text if 0 <= i < len(self.tokens) else ""

    def asserted(self, i: int, targets: frozenset[str]) -> bool:
        """Whether a mention at ``i`` is stated about the image (not hedged, not a change's target)."""
        return not self.hedged[i] and self.text(i - 1) not in targets

    @property
    def blames(self) -> bool:
        """Whether the sentence assigns blame (has a word of :data:`BLAME_CUES`)."""
        return any(t.text in BLAME_CUES for t in self.tokens)

    def negated(self, start: int, end: int, own: set[int], objects: set[str]) -> bool:
        """Whether the mention at tokens ``start:end`` is denied: a negator before it (``not the``, ``rather
        than``, ``neither ... nor``) through filler words or tokens of the same factor (``own``), or after it a
        verb and a negator (``the colour did not matter``, ``the background is irrelevant``)."""
        k = start - 1
        while k >= 0 and start - k <= 6 and self.clause[k] == self.clause[start]:
            word = self.text(k)
            if _negator(word):
                return True
            if word not in NEGATION_FILLER and word not in objects and k not in own:
                break
            k -= 1
        if k > 0 and self.text(k) in ("or", "nor") and self._negated_clause(k - 1):
            return True  # "not the colour or the size": the list shares its negator
        k = end
        while k < len(self.tokens) and (k in own or self.text(k) in objects or self.text(k) in ("of", "the")):
            k += 1
        verbs = 0
        while self.text(k) in _AUXILIARIES and verbs < 2:
            k, verbs = k + 1, verbs + 1
        word = self.text(k)
        if verbs and (_negator(word) or word.endswith("n't")) and self.text(k + 1) not in _NOT_DENIAL:
            return True
        if word.endswith("n't") and self.text(k + 1) not in _NOT_DENIAL:
            return True
        return bool(verbs) and word in _CLEARED

    def _negated_clause(self, k: int) -> bool:
        """Whether the clause of token ``k`` holds a negator."""
        return any(_negator(self.text(j)) for j in range(len(self.tokens)) if self.clause[j] == self.clause[k])


def sentences(text: str) -> list[Sentence]:
    """The sentences of ``text`` (split at ``. ; : ! ?``), empty ones dropped."""
    out, current = [], []
    for token in tokenize(text):
        if token.kind == "mark" and token.text in SENTENCE_ENDS:
            out.append(current)
            current = []
        else:
            current.append(token)
    out.append(current)
    return [Sentence(tokens) for tokens in out if tokens]
