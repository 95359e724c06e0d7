"""Cover, qrels labels and trec_eval measures: hand-computed cases and parity with pytrec_eval."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import pytrec_eval

from app.evaluation.cover import OVERALL, cover_per_query, cover_scores
from app.evaluation.qrels import LabelRule, derive_qrels, format_qrels, passage_label
from app.evaluation.trec import parse_measure, trec_scores
from app.evaluation.types import PassageGrade, RankedPassage
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
    scores = {s.system: s for s in trec_scores(qrels, rankings, parse_measure(ours, min_rating=level))}
    family = trec_eval_name.rsplit("_", 1)[0] if trec_eval_name[-1].isdigit() else trec_eval_name
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {family}, relevance_level=level)
    for system, by_query in rankings.items():
        run = {q: {p: float(r.score) for p, r in docs.items()} for q, docs in by_query.items()}
        expected = evaluator.evaluate(run)
        for query_id, values in expected.items():
            assert scores[system].per_query[query_id] == pytest.approx(values[trec_eval_name], abs=1e-12)
        assert set(scores[system].per_query) == set(expected)
