"""Per-query trec_eval values kept between recomputes: after a grading batch only the changed queries run.

A live leaderboard is recomputed after every grading batch, and a batch touches a few queries
out of hundreds. Evaluating every system on every query with pytrec_eval costs about a second
at 540 queries; evaluating the touched queries costs milliseconds. So per evaluation (collection
structure, grader and its filters, label rule, measure) the process keeps:

* the label of every pool entry the last evaluation used (``UNGRADED`` for an entry without cells),
* system → query → value as the last evaluation returned it.

A recompute derives the labels again from the current grades (tens of milliseconds, exact),
compares them entry by entry, and re-evaluates only the queries with a changed label. A trec
measure on one query reads that query's qrels and run alone, so the result is the same as a
full evaluation. The values are reused only against the very same rankings object
(``RankingFrame``): a rebuilt snapshot, or an import that changed the structure, starts afresh.
When the caller names the grades' content (the snapshot's revision and the filters' contents,
``EvaluationData.grades_key``) and it is the kept evaluation's, not even the labels are derived:
every open board re-fetches on each event, most of them for a revision already evaluated.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import ir_measures
import numpy as np

from app.evaluation.frame import GradeFrame, IntArray, RankingFrame
from app.evaluation.qrels import LabelRule, frame_labels, qrels_of
from app.evaluation.trec import per_query_values, top_depth
from app.kept import Kept

MAX_CACHED = 8  # evaluations kept per process (each holds one label per pool entry and its values)
UNGRADED = np.iinfo(np.int64).min
PerQuery = dict[str, dict[str, float]]  # system → query → value


@dataclass(frozen=True, slots=True)
class _Evaluation:
    rankings: weakref.ReferenceType[RankingFrame]
    labels: IntArray  # per pool entry
    values: PerQuery
    content: Hashable | None  # what the grades were a function of, when the caller knew (see ``trec_values``)


_kept: Kept[Hashable, _Evaluation] = Kept(MAX_CACHED)


def trec_values(
    grades: GradeFrame,
    rankings: RankingFrame,
    rule: LabelRule,
    measure: ir_measures.Measure,
    key: Hashable | None,
    *,
    content: Hashable | None = None,
) -> PerQuery:
    """``per_query_values`` of the qrels ``rule`` derives from ``grades``, re-evaluating only changed queries.

    ``key`` names the evaluation's lineage (collection, structure, grader, filters); None evaluates
    everything and keeps nothing. ``content``, when given, names the grades themselves (snapshot
    revision and the filters' contents): the same content as the kept evaluation's returns its
    values without deriving the labels again. The result is a fresh dict the caller may keep or change.
    """
    full_key = (key, repr(rule), repr(measure))
    cached = None if key is None else _kept.get(full_key)
    if cached is not None and content is not None and cached.content == content and cached.rankings() is rankings:
        return {system: dict(per_query) for system, per_query in cached.values.items()}
    entries, labels = frame_labels(grades, rule)
    runs = rankings.runs(top_depth(measure))
    if key is None:
        return per_query_values(qrels_of(grades.pool, entries, labels), runs, measure)
    dense = np.full(grades.pool.n_entries, UNGRADED, dtype=np.int64)
    dense[entries] = labels
    if cached is None or cached.rankings() is not rankings or len(cached.labels) != len(dense):
        values = per_query_values(qrels_of(grades.pool, entries, labels), runs, measure)
    else:
        changed = np.flatnonzero(cached.labels != dense)
        values = _reevaluated(cached.values, grades, dense, np.unique(grades.pool.entry_query[changed]), runs, measure)
    _kept.put(full_key, _Evaluation(weakref.ref(rankings), dense, values, content))
    return {system: dict(per_query) for system, per_query in values.items()}


def _reevaluated(
    previous: PerQuery,
    grades: GradeFrame,
    dense: IntArray,
    changed: IntArray,
    runs: Mapping[str, Mapping[str, Mapping[str, float]]],
    measure: ir_measures.Measure,
) -> PerQuery:
    """``previous`` with the ``changed`` queries (codes) evaluated afresh, each system's queries in its run's order.

    pytrec_eval reports a run's queries in the run's order, and the bootstrap resamples the values
    in that order: the merge keeps it, so the values are the same list a full evaluation returns.
    """
    if not len(changed):
        return previous
    pool = grades.pool
    entries = np.flatnonzero(np.isin(pool.entry_query, changed) & (dense != UNGRADED))
    qrels = qrels_of(pool, entries, dense[entries])
    wanted = {pool.query_ids[q] for q in changed.tolist()}
    sub_runs = {system: {q: ranked for q, ranked in run.items() if q in wanted} for system, run in runs.items()}
    fresh = per_query_values(qrels, sub_runs, measure)
    merged: PerQuery = {}
    for system, run in runs.items():
        old, new = previous.get(system, {}), fresh.get(system, {})
        merged[system] = {q: new[q] if q in wanted else old[q] for q in run if (q in new if q in wanted else q in old)}
    return merged


def clear() -> None:
    """Forget every kept evaluation."""
    _kept.clear()
