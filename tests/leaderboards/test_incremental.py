"""The warm leaderboard (per-query values kept, only changed queries re-evaluated) equals a from-scratch one.

Every step below writes what a live collection meets (grading batches, overrides, a rubric
version, an import), then compares the warm boards with boards computed after every process cache
is cleared, as JSON text: the numbers, the per-query values and their order must not move by a bit.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from app.collections import graders, snapshot
from app.collections.revision import upsert_grades
from app.collections.service import ensure_collection, get_collection, import_interchange, import_run
from app.evaluation import stats
from app.evaluation.frame import GradeFrame, PoolIndex, RankingFrame
from app.evaluation.qrels import LabelRule, frame_labels, frame_qrels, passage_label
from app.evaluation.trec import parse_measure, per_query_values, top_depth
from app.leaderboards import recompute
from app.leaderboards import service as leaderboards
from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, leaderboard_json
from app.models import BankItem, Grade, GradeOverride, Query
from app.review.flags import flag_item
from app.rubrics.service import create_version
from tests.conftest import Database
from tests.helpers import write_jsonl

N_QUERIES, N_PASSAGES, N_ITEMS, DEPTH = 6, 10, 4, 8
SYSTEMS = [f"s{s}" for s in range(5)]


def _collection_lines(rng: random.Random) -> list[Any]:
    lines = []
    for q in range(N_QUERIES):
        query_id, items = f"q{q}", [f"q{q}/i{i}" for i in range(N_ITEMS)]
        docs = [f"d{q}_{d}" for d in range(N_PASSAGES)]
        ranked = {s: rng.sample(docs, DEPTH) for s in SYSTEMS}
        paragraphs = []
        for doc in docs:
            rankings = [
                {"method": s, "paragraphId": doc, "queryId": query_id, "rank": r + 1, "score": float(DEPTH - r)}
                for s, order in ranked.items()
                for r, d in enumerate(order)
                if d == doc
            ]
            ratings = [rng.randint(0, 5) for _ in items]
            paragraphs.append(
                {
                    "paragraph_id": doc,
                    "text": doc,
                    "paragraph_data": {"judgments": [], "rankings": rankings},
                    "exam_grades": [
                        {
                            "correctAnswered": [i for i, r in zip(items, ratings, strict=True) if r > 0],
                            "wrongAnswered": [i for i, r in zip(items, ratings, strict=True) if r == 0],
                            "answers": [[i, str(r)] for i, r in zip(items, ratings, strict=True)],
                            "llm": "test-llm",
                            "llm_options": {},
                            "exam_ratio": 0.0,
                            "prompt_info": {"prompt_class": "QuestionSelfRatedUnanswerablePromptWithChoices"},
                            "self_ratings": [
                                {"question_id": i, "self_rating": r} for i, r in zip(items, ratings, strict=True)
                            ],
                        }
                    ],
                }
            )
        lines.append([query_id, paragraphs])
    return lines


REQUESTS = [
    {"measure": "P@5", "bootstrap_samples": 50},
    {"measure": "NDCG@5"},
    {"measure": "MAP", "label": "min-answers:2"},
    {"measure": "P@5", "include_overrides": True},
    {"measure": "cover", "bootstrap_samples": 50},
    {"measure": "cover", "top_k": 2, "include_overrides": True, "exclude_flagged": True},  # kept per filter content
]


def _boards(database: Database, **extra: Any) -> list[str]:
    with database.session() as session:
        collection = get_collection(session, "c")
        boards = [
            json.dumps(
                leaderboard_json(
                    compute_leaderboard(
                        session,
                        collection,
                        LeaderboardRequest(min_rating=3, **{"bootstrap_samples": 0, **options, **extra}),
                    )
                )
            )
            for options in REQUESTS
        ]
        session.commit()
    return boards


def _forget_everything() -> None:
    snapshot.clear()
    recompute.clear()
    graders.clear()
    leaderboards.clear()
    stats.clear()


def _assert_warm_equals_cold(database: Database, **extra: Any) -> None:
    warm = _boards(database, **extra)
    _forget_everything()
    assert _boards(database, **extra) == warm


def _grading_batch(database: Database, rng: random.Random, n: int) -> None:
    with database.session() as session:
        cells = session.execute(select(Grade.grader_pk, Grade.pool_entry_pk, Grade.item_id).order_by(Grade.id)).all()
        rows = [
            {"grader_pk": g, "pool_entry_pk": e, "item_id": i, "self_rating": rating, "correct": rating > 0}
            for g, e, i in rng.sample(cells, n)
            for rating in [rng.randint(0, 5)]
        ]
        upsert_grades(session, rows, update=["self_rating", "correct"])
        session.commit()


def test_the_warm_board_equals_a_rebuilt_one_through_batches_overrides_versions_and_imports(
    database: Database, tmp_path: Path
) -> None:
    rng = random.Random(16)
    _forget_everything()
    with database.session() as session:
        import_interchange(
            session, ensure_collection(session, "c"), write_jsonl(tmp_path / "c.jsonl", _collection_lines(rng))
        )
        session.commit()
    _boards(database)  # warm every evaluation
    for n in (3, 1, 12):
        _grading_batch(database, rng, n)
        _assert_warm_equals_cold(database)
    with database.session() as session:
        entry, item = session.execute(select(Grade.pool_entry_pk, Grade.item_id).order_by(Grade.id)).first() or (0, "")
        session.add(GradeOverride(pool_entry_pk=entry, item_id=item, rating=0, judge="ann"))
        session.commit()
    _assert_warm_equals_cold(database)
    with database.session() as session:
        collection = get_collection(session, "c")
        queries = session.execute(select(Query.query_id, Query.id).where(Query.collection_id == collection.id)).all()
        items = [
            BankItem(
                collection_id=collection.id, query_pk=pk, item_id=f"{q}/i{i}", kind="question", text="?", content_hash=q
            )
            for q, pk in queries
            for i in range(0, N_ITEMS, 2)  # half the items
        ]
        session.add_all(items)
        session.flush()
        version = create_version(session, collection, [item.id for item in items], created_by="test", note="half")
        number = version.number
        session.commit()
    _boards(database, rubric_version=number)
    _grading_batch(database, rng, 5)
    _assert_warm_equals_cold(database, rubric_version=number)
    with database.session() as session:  # a flag moves no revision: the kept Cover tables follow its content
        flag_item(session, get_collection(session, "c"), "q0/i0", judge="ann")
        session.commit()
    _assert_warm_equals_cold(database, rubric_version=number)
    run = tmp_path / "late.run"
    run.write_text("".join(f"q{q} Q0 d{q}_{d} {d + 1} {9.0 - d} late\n" for q in range(N_QUERIES) for d in range(3)))
    with database.session() as session:
        import_run(session, get_collection(session, "c"), run)
        session.commit()
    _assert_warm_equals_cold(database)


# ---- the pure parts, on frames -------------------------------------------------------------------


def _frames(rng: np.random.Generator, span: int = 6) -> tuple[GradeFrame, RankingFrame]:
    n_queries, per_query, n_items = 7, 12, 5
    pool = PoolIndex(
        tuple(f"q{q}" for q in range(n_queries)),
        np.repeat(np.arange(n_queries), per_query),
        tuple(f"p{e}" for e in range(n_queries * per_query)),
    )
    entry = np.repeat(np.arange(pool.n_entries), n_items)
    item = np.tile(np.arange(n_items), pool.n_entries) + n_items * np.repeat(pool.entry_query, n_items)
    rating = rng.integers(-1, span, len(entry))
    rating[::n_items] = rng.integers(0, span, pool.n_entries)  # every entry has a rating
    order = rng.permutation(len(entry))  # cells in no particular order, as a store grows
    grades = GradeFrame(
        pool,
        tuple(f"i{i}" for i in range(n_queries * n_items)),
        entry[order],
        item[order],
        rating[order],
        rating[order] > 0,
    )
    system, ranked = [], []
    for s in range(4):
        for q in range(n_queries):
            chosen = rng.choice(np.flatnonzero(pool.entry_query == q), 8, replace=False)
            system += [s] * len(chosen)
            ranked += chosen.tolist()
    n = len(ranked)
    rankings = RankingFrame(
        pool,
        ("a", "b", "c", "d"),
        np.asarray(system),
        np.asarray(ranked),
        np.tile(np.arange(1, 9), n // 8),
        np.tile(np.arange(8, 0, -1), n // 8).astype(float),
    )
    return grades, rankings


@pytest.mark.parametrize("rule", [LabelRule("max"), LabelRule("min-answers", 2), LabelRule("count", min_rating=3)])
@pytest.mark.parametrize("span", [6, 100])  # a few rating values, and a span past the counting table
def test_frame_labels_equal_the_per_passage_rule(rule: LabelRule, span: int) -> None:
    grades, _ = _frames(np.random.default_rng(span), span)
    entries, labels = frame_labels(grades, rule)
    graded = grades.to_graded()
    expected = [
        passage_label(graded[grades.pool.query_ids[int(grades.pool.entry_query[e])]][grades.pool.passage_ids[e]], rule)
        for e in entries.tolist()
    ]
    assert entries.tolist() == sorted(set(grades.entry.tolist()))
    assert labels.tolist() == expected


def test_re_evaluating_changed_queries_equals_a_full_evaluation() -> None:
    rng = np.random.default_rng(5)
    grades, rankings = _frames(rng)
    rule, measure = LabelRule("max"), parse_measure("P@5", min_rating=3)
    recompute.clear()
    assert recompute.trec_values(grades, rankings, rule, measure, "k") == _full(grades, rankings, rule, measure)
    for step in range(4):
        rating = grades.rating.copy()
        changed = rng.choice(len(rating), 3, replace=False)
        rating[changed] = rng.integers(0, 6, 3)
        grades = GradeFrame(grades.pool, grades.items, grades.entry, grades.item, rating, rating > 0)
        if step == 2:  # a whole query loses its grades (a rubric version without its items)
            grades = grades.select(grades.pool.entry_query[grades.entry] != 1)
        warm = recompute.trec_values(grades, rankings, rule, measure, "k")
        full = _full(grades, rankings, rule, measure)
        assert json.dumps(warm) == json.dumps(full)  # values and their order


def _full(grades: GradeFrame, rankings: RankingFrame, rule: LabelRule, measure: Any) -> dict[str, dict[str, float]]:
    return per_query_values(frame_qrels(grades, rule), rankings.runs(top_depth(measure)), measure)


def test_kept_values_are_not_reused_against_other_rankings() -> None:
    grades, rankings = _frames(np.random.default_rng(9))
    rule, measure = LabelRule("max"), parse_measure("NDCG@5")
    recompute.clear()
    recompute.trec_values(grades, rankings, rule, measure, "k")
    other = RankingFrame(
        rankings.pool,
        rankings.systems,
        rankings.system,
        rankings.entry,
        rankings.rank[::-1].copy(),
        rankings.score[::-1].copy(),
    )
    assert recompute.trec_values(grades, other, rule, measure, "k") == _full(grades, other, rule, measure)
