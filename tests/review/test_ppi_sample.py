"""The PPI sample (both databases): rows a judge labelled through the uniform queue, and only those.

``label_scenario`` is shared with tests/leaderboards/test_ppi_board.py, which hand-computes the PPI
board on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.evaluation.qrels import LabelRule
from app.leaderboards.service import LeaderboardRequest, evaluation_data
from app.models import Collection, OverrideEvent
from app.review.overrides import Source, record, undo_last
from app.review.ppi_sample import PPISample, labelled_sample
from app.review.queue import QueueCell, QueueRequest, next_cells
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login

JUDGE = "judge"
UNIFORM = QueueRequest(judge=JUDGE, mode="uniform")


@dataclass(frozen=True)
class Scenario:
    rows: list[str]  # passage ids in the judge's uniform order
    after_first: list[QueueCell]  # the queue after the first row was labelled
    after_partial: list[QueueCell]  # the queue after one cell of the fifth row


def _rows(session: Session, collection: Collection) -> dict[str, list[QueueCell]]:
    """The judge's uniform queue as rows (passage id → its cells in the order shown), in order."""
    rows: dict[str, list[QueueCell]] = {}
    for cell in next_cells(session, collection, UNIFORM, limit=100).cells:
        rows.setdefault(cell.passage_id, []).append(cell)
    return rows


def _set(
    session: Session, collection: Collection, cells: list[QueueCell], ratings: list[int], judge: str, source: Source
) -> None:
    for cell, rating in zip(cells, ratings, strict=True):
        record(
            session, collection, cell.pool_entry, cell.item_id, action="set", rating=rating, judge=judge, source=source
        )


def label_scenario(session: Session) -> tuple[Collection, Scenario]:
    """On the sample collection, the judge's uniform order starts aurora-6, aurora-4, bread-3, bread-1, bread-7.

    * aurora-4 (2nd) was fully overridden from the grid before: the sampler skips it, it counts;
    * the judge labels aurora-6 (grades 4, 0, 0: now relevant), bread-3 (1, 1, 1: now not
      relevant) and bread-1 (its grader's own grades), then one cell of bread-7 (incomplete);
    * a sample action on a later row (bees-1), undone, and a grid-only row at the very end
      (bread-8), count for nothing.
    """
    collection = session.scalars(select(Collection)).one()
    order = _rows(session, collection)
    names = list(order)
    assert names[:5] == ["aurora-6", "aurora-4", "bread-3", "bread-1", "bread-7"]
    _set(session, collection, order["aurora-4"], [5, 5, 5], "organizer", "grid")
    _set(session, collection, order[names[-1]], [5, 5, 5], "organizer", "grid")
    _set(session, collection, order["aurora-6"], [4, 0, 0], JUDGE, "sample")
    after_first = next_cells(session, collection, UNIFORM, limit=4).cells
    _set(session, collection, order["bread-3"], [1, 1, 1], JUDGE, "sample")
    _set(session, collection, order["bread-1"], [c.rating or 0 for c in order["bread-1"]], JUDGE, "sample")
    _set(session, collection, order["bread-7"][:1], [0], JUDGE, "sample")
    after_partial = next_cells(session, collection, UNIFORM, limit=2).cells
    _set(session, collection, order["bees-1"][:1], [5], JUDGE, "sample")
    undo_last(session, collection, JUDGE)
    session.flush()
    return collection, Scenario(names, list(after_first), list(after_partial))


def sample_of(session: Session, collection: Collection, min_rating: int = 4) -> PPISample:
    grades = evaluation_data(session, collection, LeaderboardRequest("cover", min_rating=min_rating)).grades
    return labelled_sample(
        session, collection, grades, min_rating=min_rating, label=LabelRule.parse("max", min_rating=min_rating)
    )


def test_uniform_rows_count_grid_skips_count_incomplete_rows_do_not(web_db_any: Database) -> None:
    with web_db_any.session() as session:
        empty = sample_of(session, session.scalars(select(Collection)).one())
        assert (empty.n_rows, empty.reached, empty.incomplete, empty.population, empty.judges) == (0, 0, 0, 24, ())
        collection, scenario = label_scenario(session)
        # the queue presents whole rows: after aurora-6, aurora-4 (all overridden) is skipped for bread-3
        assert [c.passage_id for c in scenario.after_first] == ["bread-3"] * 3 + ["bread-1"]
        assert [c.passage_id for c in scenario.after_partial] == ["bread-7"] * 2  # the row's other items next
        sample = sample_of(session, collection)
        session.rollback()
    assert [r.passage_id for r in sample.rows] == ["bread-1", "bread-3", "aurora-4", "aurora-6"]  # pool order
    assert (sample.reached, sample.incomplete, sample.n_rows, sample.n_cells) == (5, 1, 4, 12)
    assert sample.judges == (JUDGE,)  # the undone action left no trace; grid actions are no sample
    labels = {r.passage_id: (r.relevant, len(r.covered)) for r in sample.rows}
    assert labels == {"aurora-6": (True, 1), "aurora-4": (True, 3), "bread-3": (False, 0), "bread-1": (True, 2)}


def test_the_uniform_page_names_the_row_and_a_query_filter_is_no_sample(web_db_any: Database) -> None:
    with TestClient(create_app()) as client:
        token = login(client, JUDGE)
        page = client.get("/c/sample/review", params={"mode": "uniform"}).text
        assert 'data-source="sample"' in page
        why = re.search(r'data-testid="review-why">([^<]*)<', page)
        assert why and re.match(r"Passage row 1 of the uniform sample \(seed \d+\), item 1 of 3:", why.group(1))
        query = re.search(r"<h2>Query <code>([^<]+)</code>", page)
        assert query
        # under a query filter the order is one query's rows, not a uniform sample of the pool
        filtered = client.get("/c/sample/review", params={"mode": "uniform", "query": query.group(1)}).text
        assert 'data-source="queue"' in filtered and "do not count towards the prediction-powered" in filtered
        source = re.search(r'data-source="(\w+)"', filtered)
        cell = re.search(r'data-pool-entry="(\d+)" data-item="([^"]+)"', filtered)
        grader = re.search(r'data-grader="(\d+)"', filtered)
        assert source and cell and grader
        posted = client.post(
            "/c/sample/override",
            data={"pool_entry": cell.group(1), "item_id": cell.group(2), "action": "set", "rating": "5"}
            | {"grader": grader.group(1), "source": source.group(1)},
            headers={"X-CSRF-Token": token},
        )
        assert posted.status_code == 200, posted.text
        after = client.get("/c/sample/review", params={"mode": "uniform", "query": query.group(1)}).text
        assert re.search(r"Passage row \d+ of your uniform order \(seed \d+\), item 2 of 3, shown for query", after)
    with web_db_any.session() as session:
        assert [e.source for e in session.scalars(select(OverrideEvent))] == ["queue"]
        sample = sample_of(session, session.scalars(select(Collection)).one())
    assert (sample.reached, sample.n_rows, sample.judges) == (0, 0, ())


def test_a_sample_post_beyond_the_uniform_front_is_logged_as_a_queue_review(web_db_any: Database) -> None:
    """A ``source=sample`` far past the judge's front (a hand-made POST, a query filter) is logged as ``queue``;
    one past a whole skipped row (the page's skip) still counts."""
    with web_db_any.session() as session:
        collection = session.scalars(select(Collection)).one()
        rows = list(_rows(session, collection).values())
    front, second, later = rows[0][0], rows[1][0], rows[-1][0]
    with TestClient(create_app()) as client:
        token = login(client, JUDGE)
        for cell in (later, second, front):
            posted = client.post(
                "/c/sample/override",
                data={"pool_entry": cell.pool_entry, "item_id": cell.item_id, "rating": "5", "source": "sample"},
                headers={"X-CSRF-Token": token},
            )
            assert posted.status_code == 200, posted.text
    with web_db_any.session() as session:
        events = session.scalars(select(OverrideEvent).order_by(OverrideEvent.id)).all()
        logged = [(e.pool_entry_pk, e.source) for e in events]
        assert logged == [(later.pool_entry, "queue"), (second.pool_entry, "sample"), (front.pool_entry, "sample")]
        assert sample_of(session, session.scalars(select(Collection)).one()).reached == 2
