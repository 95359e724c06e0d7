"""Verify an extracted answer against an answer key (the reference's AnswerKey2Verifier, spec §1.7)."""

from __future__ import annotations

import string
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

from app.evaluation.parsing import fuzz_ratio, porter_stemmer

if TYPE_CHECKING:
    from nltk.tokenize import NLTKWordTokenizer

_FALSE = frozenset({"no", "incorrect", "false"})
_TRUE = frozenset({"yes", "correct", "true"})
_PUNCTUATION = str.maketrans("", "", string.punctuation)


@lru_cache(maxsize=1)
def _tokenizer() -> NLTKWordTokenizer:
    """word_tokenize = punkt sentence split + this tokenizer. Punctuation is stripped before we
    tokenize, so the sentence split cannot change the tokens and punkt's data is not needed."""
    from nltk.tokenize import NLTKWordTokenizer  # loaded on first use: nltk imports numpy, scipy and pandas

    return NLTKWordTokenizer()


@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    """NLTK's English stopword list: from nltk_data when installed, else the copy we ship."""
    try:
        from nltk.corpus import stopwords

        return frozenset(stopwords.words("english"))
    except LookupError:
        text = resources.files("app.evaluation").joinpath("data/nltk_english_stopwords.txt").read_text()
        return frozenset(text.split())


def _strip_answer(text: str) -> str:
    text = text.strip()
    return text[:-1] if text.endswith(".") else text


def stop_stem_normalize(text: str) -> str:
    """lower → strip → drop punctuation → tokenize → drop stopwords → Porter-stem → join with spaces."""
    stop = english_stopwords()
    tokens = _tokenizer().tokenize(text.lower().strip().translate(_PUNCTUATION))
    stemmer = porter_stemmer()
    return " ".join(stemmer.stem(t) for t in tokens if t not in stop)


def verify_answer(answer: str, gold_answers: Iterable[str]) -> bool:
    """Is ``answer`` a match for one of the gold answers?

    Gold answers and the answer lose surrounding space and one trailing period. A gold set of
    exactly {"true"} / {"false"} accepts yes/correct/true or no/incorrect/false. Otherwise, with
    s = stop_stem_normalize(answer): correct iff |s| ≥ 2 and s equals a normalised gold answer,
    or |s| ≥ 4 and fuzz_ratio(s, gold) > 80 for some gold, or (short s) the stripped answer is
    literally in the stripped gold set.
    """
    gold = {_strip_answer(g) for g in gold_answers}
    predicted = _strip_answer(answer)
    lowered_gold = {g.lower() for g in gold}
    if lowered_gold == {"false"}:
        return predicted.lower() in _FALSE
    if lowered_gold == {"true"}:
        return predicted.lower() in _TRUE
    normalized = stop_stem_normalize(predicted)
    normalized_gold = [stop_stem_normalize(g) for g in gold]
    if len(normalized) >= 2 and normalized in normalized_gold:
        return True
    if len(normalized) >= 4:
        return any(fuzz_ratio(normalized, g) > 80 for g in normalized_gold)
    return predicted in gold
