"""trec_eval measures on derived qrels, computed by ir_measures over pytrec_eval (spec §2.4)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import ir_measures
import pytrec_eval
from ir_measures import AP, RR, P, R, Rprec, nDCG

from app.errors import Invalid
from app.evaluation.frame import Runs
from app.evaluation.stats import mean_stderr
from app.evaluation.types import Qrels, RankedPassage, Rankings, SystemScore

_CUTOFF = re.compile(r"^(?P<name>[A-Za-z_\-]+?)(?:[@._](?P<k>\d+))?$")
_BINARY = {
    "p": P,
    "precision": P,
    "recall": R,
    "r": R,
    "map": AP,
    "ap": AP,
    "rr": RR,
    "mrr": RR,
    "recip_rank": RR,
    "r-prec": Rprec,
    "rprec": Rprec,
}
_GRADED = {"ndcg": nDCG, "ndcg_cut": nDCG}
MAX_CUTOFF = 10_000  # deeper than any pool; pytrec_eval overflows on cut-offs past a C int
MAX_MEASURE_NAME = 100
_UNKNOWN = (
    f"use P@k, Recall@k, MAP, NDCG@k, RR, R-prec, cover, n-cover or an ir_measures name (cut-offs 1 to {MAX_CUTOFF})"
)


def parse_measure(name: str, *, min_rating: int | None = None) -> ir_measures.Measure:
    """Map a trec_eval-style name (P@20, P.20, NDCG@10, MAP, RR, R-prec, Recall@100) to ir_measures.

    Binary measures count a passage as relevant iff its label ≥ the level l (trec_eval ``-l``,
    default 1), so P@k = |{relevant in the top k by score}| / k. As in trec_eval, the level does
    not change nDCG, which uses the label as the gain. Any ir_measures name is accepted verbatim.
    Raises ``Invalid`` (a ValueError) for an unknown name, or a cut-off or parameter out of bounds.
    """
    return _checked(_parse_measure(name, min_rating), name)


def _parse_measure(name: str, min_rating: int | None) -> ir_measures.Measure:
    shown = name if len(name) <= MAX_MEASURE_NAME else name[:MAX_MEASURE_NAME] + "…"
    if len(name) > MAX_MEASURE_NAME:
        raise Invalid(f"unknown measure {shown!r}: {_UNKNOWN}")
    level = 1 if min_rating is None else min_rating
    match = _CUTOFF.match(name.strip())
    if match:
        key = match["name"].lower()
        cutoff = _cutoff(match["k"], name) if match["k"] else None
        if key in _BINARY:
            measure: ir_measures.Measure = _BINARY[key](rel=level)
            return measure @ cutoff if cutoff is not None else measure
        if key in _GRADED:
            graded: ir_measures.Measure = nDCG
            return graded @ cutoff if cutoff is not None else graded
    try:
        parsed: ir_measures.Measure = ir_measures.parse_measure(name)
        return parsed
    # ir_measures evaluates a Python expression: any of these means the text is no measure
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError, RecursionError, MemoryError) as exc:
        raise Invalid(f"unknown measure {shown!r}: {_UNKNOWN}") from exc


def _cutoff(digits: str, name: str) -> int:
    if len(digits) > 6 or not 1 <= int(digits) <= MAX_CUTOFF:
        raise Invalid(f"measure {name!r}: the cut-off must be between 1 and {MAX_CUTOFF}")
    return int(digits)


def _checked(measure: ir_measures.Measure, name: str) -> ir_measures.Measure:
    """Every numeric parameter fits pytrec_eval's C int; a cut-off is 1..MAX_CUTOFF."""
    for key, value in measure.params.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key == "cutoff" and not 1 <= value <= MAX_CUTOFF:
            raise Invalid(f"measure {name!r}: the cut-off must be between 1 and {MAX_CUTOFF}")
        if not -(2**31) < value < 2**31:
            raise Invalid(f"measure {name!r}: parameter {key} is out of bounds")
    return measure


def top_depth(measure: ir_measures.Measure) -> int | None:
    """The depth k such that the measure reads only each ranking's top k, or None.

    P@k, R@k, nDCG@k and AP@k (trec_eval's P_k, recall_k, ndcg_cut_k, map_cut_k) look at the
    ranks 1..k of the run and at the qrels alone (the ideal DCG and the number of relevant
    passages come from the qrels), so evaluating the runs cut at their top k gives identical
    values. Judged-only variants re-rank after dropping unjudged passages and are never cut.
    """
    params = measure.params
    if measure.NAME not in {"P", "R", "nDCG", "AP"} or params.get("judged_only") or not params.get("cutoff"):
        return None
    return int(params["cutoff"])


def run_dict(by_query: Mapping[str, Mapping[str, RankedPassage]]) -> dict[str, dict[str, float]]:
    return {
        query_id: {passage_id: float(entry.score) for passage_id, entry in ranked.items()}
        for query_id, ranked in by_query.items()
    }


def runs_of(rankings: Rankings) -> dict[str, dict[str, dict[str, float]]]:
    """system → query → passage → score."""
    return {system: run_dict(by_query) for system, by_query in rankings.items()}


def per_query_values(qrels: Qrels, runs: Runs, measure: ir_measures.Measure) -> dict[str, dict[str, float]]:
    """system → query → value, over the queries in both the qrels and the run, as trec_eval's "all" does.

    ir_measures also reports a query the run lacks, with the measure's default 0 (trec_eval ``-c``);
    those are dropped, so a system is averaged over the queries it answered, as in the papers' tables.
    The measures trec_eval names (``_trec_eval_call``) are evaluated by pytrec_eval directly.
    """
    call = _trec_eval_call(measure)
    if call is None:
        evaluator = ir_measures.evaluator([measure], qrels)
        return {
            system: {m.query_id: float(m.value) for m in evaluator.iter_calc(run) if m.query_id in run}
            for system, run in runs.items()
        }
    trec_eval = pytrec_eval.RelevanceEvaluator(
        qrels, {call.name}, relevance_level=call.relevance_level, judged_docs_only_flag=call.judged_only
    )
    return {
        system: {query_id: values[call.name] for query_id, values in trec_eval.evaluate(run).items()}
        for system, run in runs.items()
    }


@dataclass(frozen=True, slots=True)
class _TrecEvalCall:
    name: str  # trec_eval's measure name, which pytrec_eval also reports the value under
    relevance_level: int  # trec_eval -l
    judged_only: bool  # trec_eval -J


_CUT_NAMES = {"P": "P_{cutoff}", "R": "recall_{cutoff}", "AP": "map_cut_{cutoff}", "nDCG": "ndcg_cut_{cutoff}"}
_UNCUT_NAMES = {"AP": "map", "nDCG": "ndcg", "RR": "recip_rank", "Rprec": "Rprec"}


def _trec_eval_call(measure: ir_measures.Measure) -> _TrecEvalCall | None:
    """The pytrec_eval evaluation that ir_measures runs for a P, R, AP, RR, R-prec or nDCG measure; else None.

    ir_measures evaluates these with the very same pytrec_eval call (its pytrec_eval provider:
    P@k → ``P_k`` at level ``rel``, nDCG@k → ``ndcg_cut_k``, …), then wraps each (query, value) in a
    ``Metric`` whose hash formats the measure's name: at 10× DL (31,860 system-query values) that
    wrapping cost about 15 % of the evaluation, so these measures skip it. Values and their order are
    pytrec_eval's in both ways (tests/evaluation/test_trec_direct.py compares them). Any other
    measure or parameter (gains, a DCG variant, a provider other than pytrec_eval) goes through
    ir_measures.
    """
    params = measure.params
    names = _CUT_NAMES if "cutoff" in params else _UNCUT_NAMES
    if measure.NAME not in names or set(params) - {"rel", "cutoff", "judged_only"}:
        return None
    if not ir_measures.pytrec_eval.supports(measure):
        return None
    level = 1 if measure.NAME == "nDCG" else int(measure["rel"])  # as ir_measures: the level leaves nDCG alone
    name = names[measure.NAME].format(cutoff=params.get("cutoff"))
    return _TrecEvalCall(name, level, bool(measure["judged_only"]))


def trec_scores(qrels: Qrels, runs: Runs, measure: ir_measures.Measure) -> list[SystemScore]:
    """Per system: mean ± stderr of the per-query values; the mean equals trec_eval's "all" value."""
    return scores_of(per_query_values(qrels, runs, measure))


def scores_of(values: Mapping[str, dict[str, float]]) -> list[SystemScore]:
    """Per system: mean ± stderr of its per-query values (system → query → value)."""
    scores = []
    for system, per_query in values.items():
        mean, stderr = mean_stderr(list(per_query.values()))
        scores.append(SystemScore(system=system, score=mean, stderr=stderr, per_query=per_query))
    return scores
