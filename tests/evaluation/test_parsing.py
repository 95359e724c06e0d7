from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from app.evaluation.parsing import (
    DIRECT_MATCHER,
    RATING_MATCHER,
    UnanswerableMatcher,
    fuzz_ratio,
    normalize_answer,
    parse_direct_yes_no,
    parse_self_rating,
    parse_thomas_rating,
)
from tests.helpers import interchange_records


class TestSelfRating:
    @pytest.mark.parametrize(
        ("answer", "rating"),
        [("4", 4), ("(4)", 4), ("4.", 4), (" 3 ", 3), ("0", 0), ("5", 5), ("6", 0), ("9", 0), ("8", 0)],
    )
    def test_single_digit_answers(self, answer: str, rating: int) -> None:
        assert parse_self_rating(answer, RATING_MATCHER) == rating

    @pytest.mark.parametrize("answer", ["CDG", "8 months", "the rate is 4 percent", "45"])
    def test_free_text_that_answers_gets_zero(self, answer: str) -> None:
        # The code's rule, which the published data follows (the paper says the opposite).
        assert parse_self_rating(answer, RATING_MATCHER) == 0

    @pytest.mark.parametrize("answer", ["", "unanswerable", "no answer", "Unknown", "A", "d.", "(b)", "iv"])
    def test_non_answers_and_letter_choices_get_one(self, answer: str) -> None:
        assert parse_self_rating(answer, RATING_MATCHER) == 1

    def test_letter_choices_only_count_when_in_the_matcher(self) -> None:
        assert parse_self_rating("A", UnanswerableMatcher()) == 0

    def test_tolerant_rater_needs_text_after_the_digit(self) -> None:
        assert parse_self_rating("4 - mostly", RATING_MATCHER, tolerant=True) == 4
        assert parse_self_rating("4", RATING_MATCHER, tolerant=True) == 0


def test_reparsing_every_stored_dl19_dev_answer_gives_the_stored_rating(dl19_dev: Path) -> None:
    outcomes: Counter[bool] = Counter()
    mismatches = []
    for query_id, paragraphs in interchange_records(dl19_dev / "passages-graded.jsonl.gz"):
        for paragraph in paragraphs:
            for grade in paragraph["exam_grades"]:
                stored = {r["question_id"]: r["self_rating"] for r in grade["self_ratings"]}
                for question_id, answer in grade["answers"]:
                    same = parse_self_rating(answer, RATING_MATCHER) == stored[question_id]
                    outcomes[same] += 1
                    if not same:
                        mismatches.append((query_id, paragraph["paragraph_id"], answer))
    assert outcomes[True] == 21870
    assert mismatches == []


class TestUnanswerableMatcher:
    def test_whole_string_is_stemmed_as_one_token(self) -> None:
        assert normalize_answer("not enough information") == "not enough inform"
        assert normalize_answer("unanswerable") == "unanswer"

    def test_near_misses_of_expressions_are_non_answers(self) -> None:
        assert not RATING_MATCHER.is_real_answer("Not enough information.")
        assert RATING_MATCHER.is_real_answer("Paris")

    def test_fuzz_ratio_matches_fuzzywuzzy_definition(self) -> None:
        assert fuzz_ratio("abc", "abc") == 100
        assert fuzz_ratio("", "abc") == 0
        assert fuzz_ratio("unanswer", "unanswerable") == 80  # round(100 * 16 / 20)


class TestDirectPrompts:
    @pytest.mark.parametrize(
        ("answer", "relevant"),
        [("yes", True), ("Yes", True), ("true", True), ("Yes.", False), ("No", False), ("maybe", False)],
    )
    def test_yes_no_is_exact(self, answer: str, relevant: bool) -> None:
        assert parse_direct_yes_no(answer, DIRECT_MATCHER) is relevant

    def test_thomas_scale_caps_at_two(self) -> None:
        assert parse_thomas_rating("2", DIRECT_MATCHER) == 2
        assert parse_thomas_rating("3", DIRECT_MATCHER) == 0
