"""Turn raw LLM answers into ratings and verdicts, exactly as the reference code does (spec §1.6).

The reference *inverts* what the EXAM paper says about non-numeric answers: free text that is a
real answer gets rating 0, and an unanswerability expression (or a letter choice, or the empty
string) gets rating 1. All 92,600 stored DL19 ratings follow the code, so we follow the code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.stem import PorterStemmer

UNANSWERABLE_EXPRESSIONS: frozenset[str] = frozenset(
    {
        "unanswerable",
        "no",
        "no answer",
        "not enough information",
        "unknown",
        "it is not possible to tell",
        "it does not say",
        "no relevant information",
    }
)

_LETTERS = ("A", "B", "C", "D", "a", "b", "c", "d", "i", "ii", "iii", "iv")

LETTER_CHOICE_NON_ANSWERS: frozenset[str] = frozenset(
    form for letter in _LETTERS for form in (f"{letter})", f"({letter})", f"[{letter}]", f"{letter}.", letter)
) | {"unanswerable"}

MAX_RATING = 5
_STRICT_RATING = re.compile(r"[^\w]*([0-9])[^\w]*")
_TOLERANT_RATING = re.compile(r"[^\w]*([0-9])[^\w]*\s.*")
_YES = frozenset({"yes", "correct", "true"})


@lru_cache(maxsize=1)
def porter_stemmer() -> PorterStemmer:
    """NLTK's Porter stemmer, loaded on first use: nltk's import loads numpy, scipy and pandas (~1 s),
    which listing the prompt classes (``rubric prompts``) should not pay."""
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``fuzz.ratio`` without python-Levenshtein.

    ratio(a, b) = 100 if a == b; 0 if either is empty; else round(100 · 2M / (|a| + |b|)),
    where M is the number of matched characters found by difflib's Ratcliff/Obershelp matcher.
    """
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


def normalize_answer(text: str) -> str:
    """Porter-stem the whole lower-cased string as one token: "not enough information" -> "not enough inform"."""
    return str(porter_stemmer().stem(text.lower()))


@lru_cache(maxsize=8)
def _normalized(expressions: frozenset[str]) -> tuple[str, ...]:
    return tuple(normalize_answer(e) for e in expressions)


class UnanswerableMatcher:
    """Decides whether an answer is a real answer or a refusal/non-answer."""

    def __init__(self, extra_expressions: Iterable[str] = ()) -> None:
        self.expressions = UNANSWERABLE_EXPRESSIONS | frozenset(extra_expressions)

    def is_real_answer(self, answer: str) -> bool:
        """True iff a ∉ E, stem(a) ≠ "", and fuzz_ratio(stem(a), stem(e)) ≤ 80 for every e ∈ E."""
        if answer in self.expressions:
            return False
        normalized = normalize_answer(answer)
        if not normalized:
            return False
        return all(fuzz_ratio(normalized, e) <= 80 for e in _normalized(self.expressions))


def parse_self_rating(answer: str, matcher: UnanswerableMatcher, *, tolerant: bool = False) -> int:
    """The reference's SelfRaterStrict (or SelfRaterTolerant) rating of one raw answer.

    If the answer is one digit d wrapped in non-word characters: d, unless d > 5, in which case
    0 for a real answer and 1 for a non-answer. Otherwise: 0 for a real answer, 1 for a
    non-answer or an empty string. The tolerant variant demands whitespace after the digit.
    """
    pattern = _TOLERANT_RATING if tolerant else _STRICT_RATING
    match = pattern.fullmatch(answer)
    if match:
        rating = int(match.group(1))
        if rating <= MAX_RATING:
            return rating
    return 0 if matcher.is_real_answer(answer) else 1


def parse_direct_yes_no(answer: str, matcher: UnanswerableMatcher) -> bool:
    """Direct prompts: False for non-answers (including "no"), else a.lower() ∈ {yes, correct, true} exactly."""
    if not matcher.is_real_answer(answer):
        return False
    return answer.lower() in _YES


def parse_thomas_rating(answer: str, matcher: UnanswerableMatcher) -> int:
    """Thomas et al.'s 0-2 scale: SelfRaterStrict, and any rating above 2 becomes 0."""
    rating = parse_self_rating(answer, matcher)
    return rating if rating <= 2 else 0


# The published grades were parsed with the letter choices in the set (HEAD drops them for the
# question self-rater, which changes 17 DL19 ratings); parity with the data wins.
RATING_MATCHER = UnanswerableMatcher(LETTER_CHOICE_NON_ANSWERS)
DIRECT_MATCHER = UnanswerableMatcher()
