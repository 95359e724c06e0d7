"""Cover, qrels labels and trec_eval measures: hand-computed cases and parity with pytrec_eval."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
import pytrec_eval

from app.evaluation.cover import OVERALL, cover_per_query, cover_scores
from app.evaluation.frame import NO_RATING, GradeFrame, frames_of
from app.evaluation.qrels import LabelRule, derive_qrels, format_qrels, frame_labels, passage_label
from app.evaluation.trec import parse_measure, runs_of, top_depth, trec_scores
from app.evaluation.types import GradedPool, PassageGrade, RankedPassage, Rankings
from tests.helpers import interchange_records


def grade(ratings: dict[str, int]) -> PassageGrade:
    return PassageGrade(
        ratings=ratings, correct=frozenset(i for i, r in ratings.items() if r > 0), item_ids=frozenset(ratings)
    )


GRADED = {
    "q1": {
        "a": grade({"x": 5, "y": 0, "z": 0}),
        "b": grade({"x": 0, "y": 4, "z": 0}),
        "c": grade({"x": 0, "y": 0, "z": 2}),
    },
    "q2": {"d": grade({"u": 3, "v": 1})},
}
RANKINGS = {
    "sysA": {"q1": {"a": RankedPassage(1, 3.0), "b": RankedPassage(2, 2.0)}, "q2": {"d": RankedPassage(1, 1.0)}},
    "sysB": {"q1": {"c": RankedPassage(1, 9.0), "a": RankedPassage(21, 1.0)}},
}


class TestCover:
    def test_hand_computed_exam_and_n_exam(self) -> None:
        per_query = cover_per_query(GRADED, RANKINGS, min_rating=3, top_k=20)
        exam, n_exam = per_query["sysA"]
        assert exam == {"q1": pytest.approx(2 / 3), "q2": pytest.approx(1 / 2)}
        assert n_exam == {"q1": 1.0, "q2": 1.0}
        # sysB's only top-20 passage covers nothing at τ=3; rank 21 is outside; q2 is absent, not zero.
        assert per_query["sysB"] == ({"q1": 0.0}, {"q1": 0.0})
        assert per_query[OVERALL] == ({"q1": pytest.approx(2 / 3), "q2": 0.5}, {"q1": 1.0, "q2": 1.0})

    def test_top_k_is_inclusive_on_the_raw_rank(self) -> None:
        exam, _ = cover_per_query(GRADED, RANKINGS, min_rating=3, top_k=21)["sysB"]
        assert exam == {"q1": pytest.approx(1 / 3)}

    def test_without_threshold_correct_answered_counts(self) -> None:
        exam, _ = cover_per_query(GRADED, RANKINGS, min_rating=None)["sysB"]
        assert exam == {"q1": pytest.approx(1 / 3)}

    def test_mean_and_standard_error_over_covered_queries(self) -> None:
        scores = {s.system: s for s in cover_scores(GRADED, RANKINGS, min_rating=3)}
        values = [2 / 3, 1 / 2]
        mean = sum(values) / 2
        stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / 1)
        assert scores["sysA"].score == pytest.approx(mean)
        assert scores["sysA"].stderr == pytest.approx(stdev / math.sqrt(2))
        assert scores["sysB"].stderr == 0.0


class TestLabels:
    def test_max_mth_highest_and_count(self) -> None:
        g = grade({"a": 5, "b": 4, "c": 1, "d": 0})
        assert passage_label(g, LabelRule.parse("max")) == 5
        assert passage_label(g, LabelRule.parse("min-answers:2")) == 4
        assert passage_label(g, LabelRule.parse("min-answers:3")) == 1
        assert passage_label(g, LabelRule.parse("count", min_rating=4)) == 2
        assert passage_label(g, LabelRule.parse("count")) == 3  # correctAnswered: ratings ≥ 1

    def test_unknown_rule_is_refused(self) -> None:
        with pytest.raises(ValueError, match="min-answers:M"):
            LabelRule.parse("median")

    def test_qrels_include_grade_zero_passages(self) -> None:
        qrels = derive_qrels({"q": {"p": grade({"x": 0})}}, LabelRule())
        assert format_qrels(qrels) == "q 0 p 0\n"


def _dev_qrels_and_runs(dl19_dev: Path) -> tuple[dict, dict]:
    graded: dict = {}
    rankings: dict = {}
    for query_id, paragraphs in interchange_records(dl19_dev / "passages-graded.jsonl.gz"):
        for p in paragraphs:
            ratings = {r["question_id"]: r["self_rating"] for r in p["exam_grades"][0]["self_ratings"]}
            graded.setdefault(query_id, {})[p["paragraph_id"]] = grade(ratings)
            for r in p["paragraph_data"]["rankings"]:
                rankings.setdefault(r["method"], {}).setdefault(query_id, {})[p["paragraph_id"]] = RankedPassage(
                    r["rank"], r["score"]
                )
    return graded, rankings


@pytest.mark.parametrize(
    ("ours", "trec_eval_name"),
    [
        ("P@20", "P_20"),
        ("NDCG@10", "ndcg_cut_10"),
        ("MAP", "map"),
        ("RR", "recip_rank"),
        ("R-prec", "Rprec"),
        ("Recall@100", "recall_100"),
    ],
)
@pytest.mark.parametrize("level", [1, 3, 4])
def test_trec_measures_equal_pytrec_eval_on_dev_data(
    dl19_dev: Path, ours: str, trec_eval_name: str, level: int
) -> None:
    graded, rankings = _dev_qrels_and_runs(dl19_dev)
    qrels = derive_qrels(graded, LabelRule())
    measure = parse_measure(ours, min_rating=level)
    # the runs as the leaderboard evaluates them: cut at the measure's depth where that is exact
    _, ranking = frames_of(graded, rankings)
    scores = {s.system: s for s in trec_scores(qrels, ranking.runs(top_depth(measure)), measure)}
    family = trec_eval_name.rsplit("_", 1)[0] if trec_eval_name[-1].isdigit() else trec_eval_name
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {family}, relevance_level=level)
    for system, by_query in rankings.items():
        run = {q: {p: float(r.score) for p, r in docs.items()} for q, docs in by_query.items()}
        expected = evaluator.evaluate(run)
        for query_id, values in expected.items():
            assert scores[system].per_query[query_id] == pytest.approx(values[trec_eval_name], abs=1e-12)
        assert set(scores[system].per_query) == set(expected)


@pytest.mark.parametrize("name", ["P@1", "P@5", "P@20", "NDCG@3", "NDCG@10", "Recall@5", "AP@10", "MAP", "RR"])
def test_cut_runs_give_the_measures_of_the_full_runs_even_with_tied_scores(name: str) -> None:
    rng = random.Random(5)
    passages = [f"p{i:02d}" for i in range(30)]
    qrels = {f"q{q}": {p: rng.choice([0, 0, 1, 2, 3]) for p in passages} for q in range(8)}
    rankings = {
        f"sys{s}": {
            q: {p: RankedPassage(r + 1, float(rng.choice([1, 2, 3]))) for r, p in enumerate(rng.sample(passages, 25))}
            for q in qrels
        }
        for s in range(6)
    }
    graded = {q: {p: grade({"x": label}) for p, label in docs.items()} for q, docs in qrels.items()}
    _, ranking = frames_of(graded, rankings)
    measure = parse_measure(name, min_rating=2)
    cut = {s.system: s.per_query for s in trec_scores(qrels, ranking.runs(top_depth(measure)), measure)}
    full = {s.system: s.per_query for s in trec_scores(qrels, runs_of(rankings), measure)}
    assert cut == full
    assert top_depth(measure) == (None if name in {"MAP", "RR"} else int(name.split("@")[1]))


def reference_cover(
    graded: GradedPool, rankings: Rankings, min_rating: int | None, top_k: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Spec §2.2 written out passage by passage: the oracle for the vectorised ``cover_table``."""
    result: dict[str, dict[str, tuple[float, float]]] = {system: {} for system in rankings}
    for query_id, pool in graded.items():
        seen = set().union(*(g.item_ids for g in pool.values()))
        covered = {
            p: {i for i, r in g.ratings.items() if r >= min_rating} if min_rating is not None else set(g.correct)
            for p, g in pool.items()
        }
        coverable = set().union(*covered.values())
        for system, by_query in rankings.items():
            top = [p for p, r in by_query.get(query_id, {}).items() if p in pool and r.rank <= top_k]
            if top:
                union = set().union(*(covered[p] for p in top))
                exam = len(union) / len(seen) if seen else 0.0
                result[system][query_id] = (exam, len(union) / len(coverable) if coverable else 0.0)
    return result


@pytest.mark.parametrize(("tau", "top_k"), [(None, 20), (1, 20), (3, 20), (4, 10), (5, 5)])
def test_cover_table_equals_the_passage_by_passage_definition_on_dev_data(
    dl19_dev: Path, tau: int | None, top_k: int
) -> None:
    graded, rankings = _dev_qrels_and_runs(dl19_dev)
    table = cover_per_query(graded, rankings, min_rating=tau, top_k=top_k)
    expected = reference_cover(graded, rankings, tau, top_k)
    for system, by_query in expected.items():
        exam, n_exam = table[system]
        assert exam == {q: e for q, (e, _) in by_query.items()}  # exactly, not approximately
        assert n_exam == {q: n for q, (_, n) in by_query.items()}


def test_vectorised_labels_equal_passage_label_on_dev_data(dl19_dev: Path) -> None:
    graded, _ = _dev_qrels_and_runs(dl19_dev)
    frame = GradeFrame.from_graded(graded)
    for rule in ["max", "min-answers:1", "min-answers:2", "min-answers:5", "count"]:
        for tau in (None, 3):
            parsed = LabelRule.parse(rule, min_rating=tau)
            expected = [passage_label(g, parsed) for docs in graded.values() for g in docs.values()]
            entries, labels = frame_labels(frame, parsed)
            assert len(entries) == len(expected)
            assert labels.tolist() == expected


def test_a_passage_without_any_rating_cannot_get_a_max_label() -> None:
    graded = {"q": {"p": PassageGrade({}, frozenset(), frozenset({"x"})), "r": grade({"x": 2})}}
    frame = GradeFrame.from_graded(graded)
    assert frame.rating.tolist().count(NO_RATING) == 1
    with pytest.raises(ValueError, match=r"without ratings .*1 graded passage\(s\) .* e\.g\. q/p; regrade"):
        frame_labels(frame, LabelRule.parse("max"))
    assert frame_labels(frame, LabelRule.parse("count", min_rating=1))[1].tolist() == [0, 1]


def test_frames_round_trip_to_the_dict_forms(dl19_dev: Path) -> None:
    graded, rankings = _dev_qrels_and_runs(dl19_dev)
    grades, ranking = frames_of(graded, rankings)
    assert grades.to_graded() == graded
    assert ranking.to_rankings() == rankings
    assert ranking.runs() == runs_of(rankings)


def test_overrides_restrictions_and_item_removal_on_frames() -> None:
    grades = GradeFrame.from_graded(GRADED)
    entry = grades.pool.positions()[("q1", "b")]
    overridden = grades.with_overrides({(entry, "y"): 0, (entry, "unknown"): 5}).to_graded()
    assert overridden["q1"]["b"] == PassageGrade({"x": 0, "y": 0, "z": 0}, frozenset(), frozenset({"x", "y", "z"}))
    assert grades.restrict_items({"x", "u"}).to_graded()["q2"]["d"].item_ids == {"u"}
    without = grades.without_item("q1", "x").to_graded()
    assert all("x" not in g.item_ids for g in without["q1"].values())
    assert without["q2"] == GRADED["q2"]


def test_a_system_is_averaged_over_the_queries_it_ranks_as_trec_eval_all_does() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    runs = {"full": {"q1": {"a": 1.0}, "q2": {"x": 1.0}}, "partial": {"q1": {"a": 1.0}}}
    scores = {s.system: s for s in trec_scores(qrels, runs, parse_measure("P@1"))}
    assert scores["partial"].per_query == {"q1": 1.0}
    assert scores["partial"].score == 1.0
    assert scores["full"].score == 0.5
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"P_1"}).evaluate(runs["partial"])
    assert set(expected) == {"q1"}


def _runs_oracle(ranking: object, depth: int | None) -> dict[str, dict[str, dict[str, float]]]:
    """Per row, in trec_eval's order (score descending, ties by passage id descending): the slow form."""
    from app.evaluation.frame import RankingFrame

    assert isinstance(ranking, RankingFrame)
    pool = ranking.pool
    rows = sorted(
        zip(ranking.system.tolist(), ranking.entry.tolist(), ranking.score.tolist(), strict=True),
        key=lambda r: (r[0], int(pool.entry_query[r[1]]), -r[2], [-ord(c) for c in pool.passage_ids[r[1]]] + [1]),
    )
    result: dict[str, dict[str, dict[str, float]]] = {name: {} for name in ranking.systems}
    for s, e, score in rows:
        by_query = result[ranking.systems[s]].setdefault(pool.query_ids[int(pool.entry_query[e])], {})
        if depth is None or len(by_query) < depth:
            by_query[pool.passage_ids[e]] = score
    return result


def test_runs_equal_the_per_row_form_in_order_and_cut() -> None:
    rng = random.Random(3)
    rankings: Rankings = {
        f"s{s}": {
            f"q{q}": {f"p{rng.randrange(40)}": RankedPassage(r, float(rng.randrange(5))) for r in range(1, 12)}
            for q in range(4)
            if rng.random() < 0.8
        }
        for s in range(5)
    }
    _, ranking = frames_of({}, rankings)
    for depth in (None, 1, 3, 50):
        runs = ranking.runs(depth)
        expected = _runs_oracle(ranking, depth)
        assert runs == expected
        assert [(s, list(q), [list(p) for p in q.values()]) for s, q in runs.items()] == [
            (s, list(q), [list(p) for p in q.values()]) for s, q in expected.items()
        ]
    # rows stored in trec order (as the snapshot keeps them) are taken as they stand, with the same runs
    order = ranking.trec_order()
    assert not bool((order == range(len(order))).all())
    stored = replace(ranking, system=ranking.system[order], entry=ranking.entry[order], score=ranking.score[order])
    stored = replace(stored, rank=ranking.rank[order], _derived={})
    assert (stored.trec_order() == range(len(order))).all()
    assert stored.runs(3) == _runs_oracle(ranking, 3)
