"""Browser: an open leaderboard (human overrides included) marks the rows a judge's override moved."""

from __future__ import annotations

from sqlalchemy import select

from app.collections import snapshot
from app.collections.service import get_collection
from app.db import session_scope
from app.evaluation.types import Leaderboard
from app.leaderboards.analysis import competition_ranks
from app.leaderboards.service import LeaderboardRequest, evaluation_data, score_systems
from app.models import Grade
from tests.web.test_browser import SHOTS, Session, browser, server  # noqa: F401

BOARD = "/c/sample/leaderboard?measure=cover&min_rating=4&overrides=1"


def _ranks(data: object, request: LeaderboardRequest) -> dict[str, int]:
    scores = sorted(score_systems(data, request), key=lambda s: (-s.score, s.system))  # type: ignore[arg-type]
    return {r.system: r.rank for r in competition_ranks(Leaderboard("cover", scores))}


def _rank_moving_cell() -> tuple[int, str, int, int]:
    """(pool entry, item, grader, rating) of the first cell whose flip changes a rank at τ = 4.

    A flip is 0 for a cell rated ≥ 4 (covered), else 5 (newly covered).
    """
    with session_scope() as session:
        collection = get_collection(session, "sample")
        request = LeaderboardRequest("cover", min_rating=4, bootstrap_samples=0)
        data = evaluation_data(session, collection, request)
        position = snapshot.current(session, collection).structure.position
        cells = session.execute(
            select(Grade.pool_entry_pk, Grade.item_id, Grade.grader_pk, Grade.self_rating)
            .where(Grade.grader_pk == data.grader.id, Grade.self_rating.is_not(None))
            .order_by(Grade.id)
        ).all()
    baseline = _ranks(data, request)
    for entry, item, grader, rating in cells:
        flipped = 0 if rating >= 4 else 5
        changed = data.grades.with_overrides({(position[entry], item): flipped})
        if _ranks(type(data)(data.grader, changed, data.ranking, data.pool), request) != baseline:
            return entry, item, grader, flipped
    raise AssertionError("no single override moves a rank on the sample")


def test_an_override_highlights_the_rows_it_moves(server: str, browser: object) -> None:  # noqa: F811
    entry, item, grader, rating = _rank_moving_cell()
    judge = Session(browser, server, "judge")
    judge.visit(BOARD)
    judge.page.wait_for_selector("[sse-connect][data-stream=open]", state="attached")  # updates reach the board now
    token = judge.page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    response = judge.page.request.post(
        f"{server}/c/sample/override",
        form={"pool_entry": str(entry), "item_id": item, "action": "set", "rating": str(rating), "grader": str(grader)},
        headers={"X-CSRF-Token": token},
    )
    assert response.status == 200, response.text()
    judge.page.wait_for_selector("tbody.ranked tr.changed .delta", timeout=30_000)
    deltas = judge.page.locator("tbody.ranked tr.changed .delta").all_inner_texts()
    assert any(text.startswith(("▲", "▼")) for text in deltas), deltas
    assert "Leaderboard updated" in judge.page.locator("#board-live").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    judge.page.screenshot(path=str(SHOTS / "leaderboard-sample.png"), full_page=True)
    assert judge.errors == []
    judge.close()
