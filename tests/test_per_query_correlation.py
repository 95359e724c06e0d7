"""Per-query correlation against the manual judgments: each side at its own relevance level.

The derived qrels use the grade threshold (self-ratings 0..5), the manual judgments their own
level (−2..3, TREC DL's binary cut is 2). A query whose correlation is undefined says why.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounts.service import create_user
from app.db import session_scope
from app.evaluation.correlation import QueryCorrelation, Undefined, per_query_correlation, rank_correlation
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import login

BINARY_MEASURES = ("P@20", "MAP", "RR", "R-prec")


def _scores(**systems: float) -> dict[str, dict[str, float]]:
    return {system: {"q": value} for system, value in systems.items()}


# -- the pure helper ---------------------------------------------------------------------------


def test_constant_manual_scores_say_so() -> None:
    result = per_query_correlation(_scores(a=0.5, b=0.2, c=0.1), _scores(a=0.0, b=0.0, c=0.0))["q"]
    assert result.reason is Undefined.CONSTANT_MANUAL
    assert "manual judgments" in result.reason.text
    assert math.isnan(result.correlation.spearman) and result.correlation.n_systems == 3


def test_constant_predicted_scores_say_so() -> None:
    result = per_query_correlation(_scores(a=0.3, b=0.3, c=0.3), _scores(a=1.0, b=0.5, c=0.0))["q"]
    assert result.reason is Undefined.CONSTANT_PREDICTED


def test_fewer_than_three_systems_say_so() -> None:
    predicted = {"a": {"q": 1.0}, "b": {"q": 0.0}, "c": {}}
    result = per_query_correlation(predicted, _scores(a=1.0, b=0.0, c=0.5))["q"]
    assert result.reason is Undefined.FEW_SYSTEMS and result.correlation.n_systems == 2


def test_defined_query_keeps_the_rank_correlation() -> None:
    predicted, manual = _scores(a=0.9, b=0.5, c=0.6, d=0.1), _scores(a=1.0, b=0.7, c=0.4, d=0.0)
    result = per_query_correlation(predicted, manual)["q"]
    expected = rank_correlation({s: v["q"] for s, v in predicted.items()}, {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    assert result == QueryCorrelation(expected) and result.reason is None
    assert result.correlation.spearman == pytest.approx(0.8)


# -- dl19-dev through the CLI and the web --------------------------------------------------------


@pytest.fixture
def dev_db(dev_database: Database) -> Database:
    """A private copy of the session's dl19-dev import (tests/conftest.py), on each backend."""
    return dev_database


def _cli_board(measure: str, *extra: str) -> dict[str, Any]:
    args = ("leaderboard", "dl19", "--measure", measure, "--min-rating", "4", "--per-query-correlation")
    return json.loads(cli(*args, "--format", "json", *extra))  # type: ignore[no-any-return]


@pytest.mark.parametrize("measure", BINARY_MEASURES)
def test_binary_measures_are_finite_at_the_default_levels(dev_db: Database, measure: str) -> None:
    board = _cli_board(measure)
    assert board["per_query_levels"] == {"min_rating": 4, "min_judgment": 2}
    queries = board["per_query_correlation"]
    defined = [q for q in queries.values() if q["reason"] is None]
    assert len(queries) == 10 and len(defined) >= 8, queries  # all 10 on dl19-dev today
    for q in defined:
        assert math.isfinite(q["spearman"]) and math.isfinite(q["kendall"]) and q["reason_text"] is None
    for q in queries.values():
        if q["reason"] is not None:
            assert q["spearman"] is None and q["reason"] in {u.value for u in Undefined} and q["reason_text"]


def test_nothing_relevant_by_hand_makes_every_query_constant(dev_db: Database) -> None:
    # level 4 is above every judgment (−2..3): all manual scores are 0
    queries = _cli_board("P@20", "--min-judgment", "4")["per_query_correlation"]
    assert {q["reason"] for q in queries.values()} == {Undefined.CONSTANT_MANUAL.value}


@pytest.mark.parametrize("level", ["0", "5"])
def test_min_judgment_is_bounded(dev_db: Database, level: str) -> None:
    args = ("leaderboard", "dl19", "--measure", "P@20", "--per-query-correlation", "--min-judgment", level)
    cli(*args, expect=2)


def test_cli_json_and_web_table_agree(dev_db: Database) -> None:
    board = _cli_board("P@20", "--min-judgment", "1")
    with session_scope() as session:
        create_user(session, "viewer", "viewer", "reads-the-grid-1")
    with TestClient(create_app()) as client:
        login(client, "viewer")
        page = client.get("/c/dl19/leaderboard", params={"measure": "P@20", "min_rating": 4, "min_judgment": 1})
        assert page.status_code == 200, page.text
        assert "manual judgments: relevance ≥ 1" in page.text and "rating ≥ 4" in page.text
        table = page.text.split('data-testid="per-query"', 1)[1].split("</table>", 1)[0]
        rows = dict(re.findall(r"<tr><td>([^<]+)</td>(.*?)</tr>", table))
        assert client.get("/c/dl19/leaderboard", params={"measure": "P@20", "min_judgment": 9}).status_code == 400
    assert set(rows) == set(board["per_query_correlation"])
    for query, value in board["per_query_correlation"].items():
        if value["reason"] is None:
            cells = re.findall(r"<td>([-0-9.]+)</td>", rows[query])
            assert cells == [f"{value['spearman']:.3f}", f"{value['kendall']:.3f}", str(value["n_systems"])]
        else:
            assert f"undefined: {value['reason_text']}" in rows[query]
