"""Question impact: the incremental computation equals a full recompute per item, bit for bit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scipy.stats import kendalltau

from app.collections.service import ensure_collection
from app.db import session_scope
from app.evaluation.cover import OVERALL
from app.leaderboards.service import EvaluationData, LeaderboardRequest, load_evaluation_data, score_systems
from app.oversight.impact import question_impact
from tests.conftest import Database
from tests.web.conftest import web_db  # noqa: F401  (the session's graded sample, copied per test)


@pytest.fixture
def sample_db(web_db: Database) -> Database:  # noqa: F811
    """The sample collection, graded by the default grader (the embedded worker): a copy of the session's."""
    return web_db


def _oracle(data: EvaluationData, request: LeaderboardRequest, query_id: str | None) -> dict[tuple[str, str], float]:
    """τ per (query, item), recomputing the whole leaderboard once per item (the slow, obvious way)."""
    grades = data.grades
    base = {s.system: s.score for s in score_systems(data, request) if s.system != OVERALL}
    systems = sorted(base)
    cells = zip(grades.pool.entry_query[grades.entry].tolist(), grades.item.tolist(), strict=True)
    result = {}
    for query, item in sorted({(grades.pool.query_ids[q], grades.items[i]) for q, i in cells}):
        if query_id is not None and query != query_id:
            continue
        pruned = replace(data, grades=grades.without_item(query, item))
        scores = {s.system: s.score for s in score_systems(pruned, request) if s.system != OVERALL}
        result[(query, item)] = kendalltau([base[s] for s in systems], [scores[s] for s in systems]).statistic
    return result


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _check(data: EvaluationData, request: LeaderboardRequest, query_id: str | None = None) -> int:
    impacts = question_impact(data, request, query_id)
    oracle = _oracle(data, request, query_id)
    assert {(r.query_id, r.item_id) for r in impacts} == set(oracle)
    for row in impacts:
        assert _same(row.tau, oracle[(row.query_id, row.item_id)]), row
    return len(impacts)


@pytest.mark.parametrize("measure", ["cover", "n-cover"])
@pytest.mark.parametrize("min_rating", [3, 4, 5])
def test_impact_on_the_sample_equals_a_full_recompute(sample_db: Database, measure: str, min_rating: int) -> None:
    with session_scope() as session:
        data = load_evaluation_data(session, ensure_collection(session, "sample"), model=None, prompt_class=None)
    assert _check(data, LeaderboardRequest(measure=measure, min_rating=min_rating, bootstrap_samples=0)) > 0


def test_impact_on_dl19_dev_equals_a_full_recompute(dev_database: Database) -> None:
    with session_scope() as session:
        data = load_evaluation_data(session, ensure_collection(session, "dl19"), model=None, prompt_class=None)
    request = LeaderboardRequest(measure="cover", min_rating=4, bootstrap_samples=0)
    for query_id in data.grades.pool.query_ids[:3]:
        assert _check(data, request, query_id) > 0


def test_score_changes_are_the_moved_systems(dev_sqlite_database: Database) -> None:
    with session_scope() as session:
        data = load_evaluation_data(session, ensure_collection(session, "dl19"), model=None, prompt_class=None)
    request = LeaderboardRequest(measure="cover", min_rating=4, bootstrap_samples=0)
    query_id = data.grades.pool.query_ids[0]
    base = {s.system: s.score for s in score_systems(data, request)}
    for row in question_impact(data, request, query_id):
        pruned = replace(data, grades=data.grades.without_item(query_id, row.item_id))
        after = {s.system: s.score for s in score_systems(pruned, request)}
        moved = {s for s in base if s != OVERALL and after[s] != base[s]}
        assert {c.system for c in row.changes} == moved
        assert all(c.before == base[c.system] and c.after == after[c.system] for c in row.changes)
        assert [abs(c.delta) for c in row.changes] == sorted((abs(c.delta) for c in row.changes), reverse=True)


def test_unknown_query_and_trec_measures(sample_db: Database) -> None:
    from app.errors import Invalid

    with session_scope() as session:
        data = load_evaluation_data(session, ensure_collection(session, "sample"), model=None, prompt_class=None)
    assert question_impact(data, LeaderboardRequest(measure="cover", min_rating=4), "no-such-query") == ()
    with pytest.raises(Invalid):
        question_impact(data, LeaderboardRequest(measure="P@20", min_rating=4))
