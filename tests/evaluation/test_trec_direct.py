"""The cold leaderboard's fast paths are exact: pytrec_eval called directly equals ir_measures bit for bit,
and the runs built from array slices equal the per-row form."""

from __future__ import annotations

import random
from dataclasses import replace

import ir_measures
import pytest

from app.evaluation.frame import frames_of
from app.evaluation.trec import _trec_eval_call, parse_measure, per_query_values
from app.evaluation.types import RankedPassage, Rankings
from tests.evaluation.test_measures import _runs_oracle

Runs = dict[str, dict[str, dict[str, float]]]


def _collection(seed: int) -> tuple[dict[str, dict[str, int]], Runs]:
    """Graded qrels 0..3 and runs with tied scores, unjudged passages, a query outside the qrels,
    a judged query no system ranks, an all-zero query, an empty query and an empty system."""
    rng = random.Random(seed)
    qrels = {f"q{q}": {f"p{p}": rng.choice((0, 0, 1, 2, 3)) for p in rng.sample(range(30), 12)} for q in range(6)}
    qrels["q_zero"] = {"p1": 0, "p2": 0}
    qrels["q_unranked"] = {"p1": 3}
    queries = [*(f"q{q}" for q in range(6)), "q_zero", "q_unjudged"]
    runs: Runs = {
        f"s{s}": {
            q: {f"p{p}": float(rng.randrange(6)) for p in rng.sample(range(30), rng.randrange(1, 25))}
            for q in rng.sample(queries, rng.randrange(1, len(queries) + 1))
        }
        for s in range(5)
    }
    runs["s_empty_query"] = {"q0": {}, "q1": {"p1": 1.0}}
    runs["s_nothing"] = {}
    return qrels, runs


def _ir_measures_values(qrels: dict[str, dict[str, int]], runs: Runs, measure: ir_measures.Measure) -> Runs:
    """The oracle: ir_measures' own evaluation, the queries the run lacks dropped."""
    evaluator = ir_measures.evaluator([measure], qrels)
    return {
        system: {m.query_id: float(m.value) for m in evaluator.iter_calc(run) if m.query_id in run}
        for system, run in runs.items()
    }


def _bits(values: Runs) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every value as its exact bits, in order: equal floats that differ in the last bit, or in their order, differ."""
    return [(system, [(q, v.hex()) for q, v in by_query.items()]) for system, by_query in values.items()]


DIRECT = [
    f"{name}{cut}"
    for name, cuts in (("P", ("@1", "@5", "@20")), ("Recall", ("@3", "@100")), ("NDCG", ("", "@5", "@10")))
    for cut in cuts
] + ["MAP", "AP@10", "RR", "R-prec"]


@pytest.mark.parametrize("name", DIRECT)
def test_pytrec_eval_directly_equals_ir_measures_bit_for_bit(name: str) -> None:
    for seed in (1, 2):
        qrels, runs = _collection(seed)
        for level in (None, 2, 3):
            measure = parse_measure(name, min_rating=level)
            assert _trec_eval_call(measure) is not None
            assert _bits(per_query_values(qrels, runs, measure)) == _bits(_ir_measures_values(qrels, runs, measure))


@pytest.mark.parametrize(
    "name", ["P(judged_only=True)@5", "nDCG(judged_only=True)@10", "AP(rel=2,judged_only=True)", "RR(rel=3)"]
)
def test_ir_measures_spellings_of_trec_eval_measures_take_the_direct_path_exactly(name: str) -> None:
    qrels, runs = _collection(3)
    measure = parse_measure(name)
    assert _trec_eval_call(measure) is not None
    assert _bits(per_query_values(qrels, runs, measure)) == _bits(_ir_measures_values(qrels, runs, measure))


@pytest.mark.parametrize("name", ["Bpref", "RR@10", "nDCG(gains={0:0,1:1,2:3,3:7})@5"])
def test_other_measures_and_parameters_go_through_ir_measures(name: str) -> None:
    qrels, runs = _collection(4)
    measure = parse_measure(name)
    assert _trec_eval_call(measure) is None
    assert _bits(per_query_values(qrels, runs, measure)) == _bits(_ir_measures_values(qrels, runs, measure))


def test_runs_of_frames_with_empty_systems_and_no_rows_equal_the_per_row_form() -> None:
    rng = random.Random(5)
    rankings: Rankings = {
        f"s{s}": {
            f"q{q}": {f"p{rng.randrange(30)}": RankedPassage(r, float(rng.randrange(4))) for r in range(1, 30)}
            for q in range(3)
        }
        for s in range(3)
    }
    rankings = {"s_none": {}, **rankings, "s_last_none": {}}
    _, ranking = frames_of({}, rankings)
    order = ranking.trec_order()
    stored = replace(
        ranking,
        system=ranking.system[order],
        entry=ranking.entry[order],
        rank=ranking.rank[order],
        score=ranking.score[order],
        _derived={},
    )
    for frame in (ranking, stored):
        for depth in (None, 1, 20):
            runs, expected = frame.runs(depth), _runs_oracle(ranking, depth)
            assert [(s, [(q, list(p.items())) for q, p in by_query.items()]) for s, by_query in runs.items()] == [
                (s, [(q, list(p.items())) for q, p in by_query.items()]) for s, by_query in expected.items()
            ]
            assert all(type(v) is float for by_query in runs.values() for p in by_query.values() for v in p.values())
    empty = replace(ranking, system=ranking.system[:0], entry=ranking.entry[:0], rank=ranking.rank[:0])
    empty = replace(empty, score=ranking.score[:0], _derived={})
    assert empty.runs(20) == {name: {} for name in rankings}


def test_a_dcg_variant_is_left_to_ir_measures() -> None:
    assert _trec_eval_call(ir_measures.parse_measure("nDCG(dcg='exp-log2')@10")) is None
