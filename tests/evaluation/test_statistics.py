"""Correlations (against scipy), τ_AP, κ, bootstrap CIs and the reference's number formatting."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from app.evaluation.agreement import Confusion, LabelledPassage, confusion, format_kappa, judgment_sets, rating_tables
from app.evaluation.correlation import MissingSystemsError, rank_correlation, tau_ap
from app.evaluation.formatting import reference_round, trec_eval_round
from app.evaluation.stats import bootstrap_ci, mean_stderr
from app.evaluation.types import PassageGrade


class TestRankCorrelation:
    def test_equals_scipy_on_average_ranks(self) -> None:
        scores = {"a": 0.9, "b": 0.7, "c": 0.7, "d": 0.2, "e": 0.5, "unofficial": 1.0}
        official = {"a": 2, "b": 1, "c": 3, "d": 5, "e": 4}
        result = rank_correlation(scores, official)
        ranks = stats.rankdata([-scores[s] for s in official], method="average")
        assert result.spearman == pytest.approx(stats.spearmanr(list(official.values()), ranks)[0])
        assert result.kendall == pytest.approx(stats.kendalltau(list(official.values()), ranks)[0])
        assert result.n_systems == 5

    def test_missing_official_system_is_named(self) -> None:
        with pytest.raises(MissingSystemsError, match="ghost"):
            rank_correlation({"a": 1.0}, {"a": 1, "ghost": 2})

    def test_constant_scores_give_nan(self) -> None:
        result = rank_correlation({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1, "b": 2, "c": 3})
        assert math.isnan(result.spearman) and math.isnan(result.kendall)


class TestTauAP:
    def test_identity_and_reversal(self) -> None:
        assert tau_ap([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
        assert tau_ap([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0

    def test_swaps_at_the_top_cost_more_than_at_the_bottom(self) -> None:
        assert tau_ap([1, 2, 3, 4], [2, 1, 3, 4]) == pytest.approx(1 / 3)
        assert tau_ap([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(7 / 9)

    def test_ties_are_not_resolved_in_our_favour(self) -> None:
        assert tau_ap([1, 2], [1.5, 1.5]) == 0.0


class TestKappa:
    def test_paper_strict_and_lenient_tables(self) -> None:
        assert format_kappa(Confusion(1439, 1356, 1062, 5403).kappa()) == "0.36"
        assert format_kappa(Confusion(1627, 1809, 874, 4950).kappa()) == "0.34"

    def test_perfect_agreement_and_degenerate_case(self) -> None:
        assert Confusion(5, 0, 0, 5).kappa() == 1.0
        assert Confusion(4, 0, 0, 0).kappa() == 0.0

    def test_confusion_uses_any_judgment_in_the_set(self) -> None:
        passages = [LabelledPassage(4, (0, 2)), LabelledPassage(1, (3,)), LabelledPassage(0, (0,))]
        relevant, _ = judgment_sets(2)
        assert confusion(passages, frozenset({4, 5}), relevant) == Confusion(1, 0, 1, 1)

    def test_strict_table_uses_the_second_highest_rating(self) -> None:
        graded = {
            "q": {
                "p1": PassageGrade({"a": 5, "b": 4}, frozenset("ab"), frozenset("ab")),
                "p2": PassageGrade({"a": 5, "b": 0}, frozenset("a"), frozenset("ab")),
            }
        }
        judgments = {"q": {"p1": [2], "p2": [0]}}
        strict = rating_tables(graded, judgments, min_answers=2, min_judgment=2)[3]
        assert strict.name == "STRICT"
        assert strict.counts == ((1, 0), (0, 1))
        assert strict.kappa[0][1] == 1.0


class TestSummaries:
    def test_mean_stderr_edge_cases(self) -> None:
        assert mean_stderr([]) == (0.0, 0.0)
        assert mean_stderr([0.4]) == (0.4, 0.0)

    def test_bootstrap_is_seeded_and_brackets_the_mean(self) -> None:
        values = [0.1, 0.5, 0.3, 0.9, 0.2, 0.4]
        first = bootstrap_ci(values, samples=500, seed=7)
        assert first == bootstrap_ci(values, samples=500, seed=7)
        assert first[0] < sum(values) / len(values) < first[1]
        assert bootstrap_ci([0.3], samples=500, seed=7) == (0.3, 0.3)

    def test_reference_double_rounding(self) -> None:
        assert reference_round(0.61047) == 0.611
        assert round(0.61047, 3) == 0.61
        assert trec_eval_round(0.61047) == 0.6105
