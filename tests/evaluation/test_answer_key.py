from __future__ import annotations

from app.evaluation.answer_key import english_stopwords, stop_stem_normalize, verify_answer


def test_normalisation_drops_punctuation_and_stopwords_and_stems() -> None:
    assert stop_stem_normalize("The Eiffel Tower, in Paris!") == "eiffel tower pari"
    assert "the" in english_stopwords() and len(english_stopwords()) >= 179


def test_exact_normalised_match() -> None:
    assert verify_answer("the Eiffel Tower.", ["Eiffel Tower"])


def test_fuzzy_match_above_eighty() -> None:
    assert verify_answer("photosynthesis process", ["photosynthesis processes"])
    assert not verify_answer("mitochondria", ["photosynthesis"])


def test_short_answers_need_a_literal_match() -> None:
    assert verify_answer("42", ["42"])
    assert not verify_answer("43", ["42"])


def test_true_false_keys() -> None:
    assert verify_answer("Yes", ["true"])
    assert verify_answer("incorrect", ["False."])
    assert not verify_answer("yes", ["false"])
