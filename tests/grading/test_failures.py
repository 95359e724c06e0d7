"""Pure pieces of failing well: error kinds, their summary, the fail-fast rule, and top-k renormalisation."""

from __future__ import annotations

import math

import pytest

from app.grading.backends.base import ScoreResult
from app.grading.backends.openai_http import score_from_logprobs
from app.grading.failures import ConsecutiveErrors, ErrorSummary, error_kind


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("NotFoundError: HTTP 404 from http://h/v1/chat/completions: …", "NotFoundError"),
        ("RateLimitError after 7 attempts: slow down", "RateLimitError"),
        ("EmptyReply: the model returned no text", "EmptyReply"),
        ("could not parse the model's JSON: Expecting value", "could not parse the model's JSON"),
    ],
)
def test_an_error_kind_is_its_leading_name(message: str, kind: str) -> None:
    assert error_kind(message) == kind


def test_a_summary_counts_by_kind_and_round_trips_through_its_text() -> None:
    summary = ErrorSummary.of(["NotFoundError: a", None, "NotFoundError: b", "EmptyReply: c | d\nmore"])
    assert summary.lines() == ["NotFoundError ×2: NotFoundError: a", "EmptyReply ×1: EmptyReply: c / d more"]
    parsed = ErrorSummary.parse(summary.render())
    assert (parsed.counts, parsed.total) == ({"NotFoundError": 2, "EmptyReply": 1}, 3)


def test_fail_fast_trips_on_a_run_of_one_kind_only() -> None:
    streak = ConsecutiveErrors(3)
    fed = ["A: 1", "A: 2", None, "A: 3", "B: 1", "A: 4", "PromptTooLong: x", "A: 5", "NotSent: y", "A: 6"]
    assert [streak.feed(e) for e in fed] == [False] * 9 + [True]
    assert streak.reason() == "stopped after 3 consecutive A errors: A: 4"
    assert not ConsecutiveErrors(0).feed("A: 1")  # 0: never stop


def test_digits_missing_from_the_top_k_are_unknown_not_zero() -> None:
    top = {"1": math.log(0.5), " 2": math.log(0.2), "2": math.log(0.1), "The": math.log(0.15)}
    result = score_from_logprobs(top, ["0", "1", "2", "3", "4", "5"])
    assert isinstance(result, ScoreResult)
    assert result.probabilities == pytest.approx({"1": 0.5 / 0.8, "2": 0.3 / 0.8})  # 0, 3, 4, 5 left out
    assert result.valid_mass == pytest.approx(0.8)


def test_no_grade_token_in_the_top_k_is_an_error() -> None:
    failed = score_from_logprobs({"The": -0.1, "A": -3.0}, ["0", "1"])
    assert not isinstance(failed, ScoreResult)
    assert str(failed.error).startswith("NoAnswerToken: no answer token among the top 2 logprobs")
