"""What the claim parser finds in an explanation (:class:`Reading`, :class:`Claim`) and how a reading is graded.

The grading rubric (docs/GRADING.md) is :meth:`Reading.match`: 1 when the true cause is the only blamed
factor; 0.5 when it is blamed with exactly one other factor (together or hedged between the two) and the two
are not every factor of the sheet; 0 when the cause is not blamed, when three or more factors (or every
factor) are, when any checkable claim about the image is false, or when the ``Edit:`` line changes a factor
the text does not blame (an inconsistent explanation).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from nemo_train.backends.jsonparse import extract_json
from nemo_train.scoring.clauses import phrase

__all__ = ["Claim", "Reading", "split_edit"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_EDIT = re.compile(r"\bedit:", re.IGNORECASE)


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
    is ``said``; the image has ``actual``. A number holds within ``tolerance`` (strictly, or exactly); an
    ``unsigned`` one (an angle without a direction) claims only its size."""

    subject: str
    said: str
    actual: str
    tolerance: float = 0.0
    unsigned: bool = False

    @property
    def holds(self) -> bool:
        if _NUMBER.fullmatch(self.said) and _NUMBER.fullmatch(self.actual.strip()):
            said, actual = float(self.said), float(self.actual)
            if self.unsigned:
                said, actual = abs(said), abs(actual)
            return math.isclose(said, actual, abs_tol=1e-6) or abs(said - actual) < self.tolerance
        return phrase(self.said) == phrase(self.actual)

    def __str__(self) -> str:
        size = "size " if self.unsigned else ""
        return f"{self.subject} {size}{self.said!r} (image: {self.actual!r})"


@dataclass(frozen=True)
class Reading:
    """What an explanation blames (factor names, first mention first), its checkable claims, the factors its
    ``Edit:`` line changes (``edit_blamed``) and the sheet's factors (``factors``, for the every-factor rule)."""

    blamed: tuple[str, ...]
    claims: tuple[Claim, ...] = ()
    blamed_by_edit: bool = False
    edit_blamed: tuple[str, ...] = ()
    factors: tuple[str, ...] = ()

    @property
    def false_claims(self) -> list[Claim]:
        return [c for c in self.claims if not c.holds]

    @property
    def grounding(self) -> float | None:
        """Share of checkable claims that are true; ``None`` when there is none."""
        if not self.claims:
            return None
        return sum(c.holds for c in self.claims) / len(self.claims)

    @property
    def consistent(self) -> bool:
        """Whether the Edit line (if any) changes only factors the text blames."""
        return set(self.edit_blamed) <= set(self.blamed)

    @property
    def describes_nothing(self) -> bool:
        """Whether it blames three or more factors, or every factor of the sheet (two or more)."""
        blamed = set(self.blamed)
        return len(blamed) >= 3 or (len(blamed) > 1 and blamed == set(self.factors))

    def match(self, cause: str) -> tuple[float, str]:
        """LLM Match against ``cause`` with a reason, by the rubric of the module doc."""
        blamed = ", ".join(self.blamed) or "nothing"
        how = " (by its edit)" if self.blamed_by_edit else ""
        if not self.consistent:
            edits = ", ".join(f for f in self.edit_blamed if f not in self.blamed)
            score, reason = 0.0, f"its Edit line changes {edits}, the text blames {blamed}: a contradiction"
        elif cause not in self.blamed:
            score, reason = 0.0, f"blames {blamed}{how}, not the cause {cause}"
        elif self.describes_nothing:
            score, reason = 0.0, f"blames {blamed}: too many factors to describe the error"
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
