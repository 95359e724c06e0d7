"""The prediction-powered (PPI) leaderboard: Cover and P@k corrected with the judges' uniform sample.

Predictions f are the grader's grades only (the board's data loaded *without* overrides); the
human labels are the rows of the uniform sample (app/review/ppi_sample.py). The estimators are
app/evaluation/ppi.py's; this module builds their inputs (docs/ppi.md):

* P@k is linear in the rows' relevance: P@k_s = Σ_u w_su·Y_u with
      w_su = [q_u ∈ Q_s]·[u ∈ Top_k(s, q_u)] / (k·|Q_s|),
  Q_s the queries trec_eval averages over for s (those in both the qrels and s's run) and Top_k in
  trec_eval's order (score descending, ties by passage id descending), Y_u = [label_u ≥ l], l the
  relevance level (τ, 1 when unset). ``ppi_linear`` with PPI++ power tuning.
  k is the board's own cut-off when the board's measure is P@k, else the request's ``top_k``.
* Cover is a union over the top-k passages, not linear in rows: ``ppi_linearised`` with
      Δ_su = Cover_s(f with row u's covered items replaced by the judges') − Cover_s(f)
           = (|U'_{s,q_u}| − |U_{s,q_u}|) / (|Q_{q_u}|·|Q^C_s|)   for u ∈ Top_k(s, q_u), else 0,
  U_{s,q} the union of the covered items of s's top k for q, Q^C_s the queries Cover averages over.

``plain`` is the ordinary board's value for the same settings, computed by the same code
(``score_systems``), so it equals the LLM-only leaderboard exactly; the P@k estimate is moved by
λ times the floating-point difference between that value and Σ_u w_su·f_u (summation order only).

Honesty (docs/ppi.md): both measures lie in [0, 1], so estimates and intervals are clipped to it
(``within``); a system whose labelled rows show no disagreement gets no interval, with the reason;
each estimate carries its *support*, the labelled rows in the system's top k, and an interval on
fewer than ``MIN_SUPPORT`` of them is marked unreliable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import sparse
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.evaluation.cover import OVERALL, cover_scores_of, cover_table
from app.evaluation.formatting import Table
from app.evaluation.frame import BoolArray, FloatArray, GradeFrame, IntArray, RankingFrame
from app.evaluation.ppi import PPIEstimate, ppi_linear, ppi_linearised, within
from app.evaluation.qrels import LabelRule, frame_labels
from app.evaluation.types import SystemScore
from app.kept import Kept
from app.leaderboards.measures import TrecMeasure
from app.leaderboards.service import EvaluationData, LeaderboardRequest, evaluation_data, score_systems
from app.models import Collection
from app.review.ppi_sample import PPISample, labelled_sample, relevance_level

ALPHA = 0.05  # 95 % intervals
MIN_SUPPORT = 10  # below this many labelled rows in a system's top k, its normal interval is unreliable


def reliable(estimate: PPIEstimate) -> bool:
    """Whether the interval rests on at least ``MIN_SUPPORT`` labelled rows in the system's top k."""
    return estimate.stderr is not None and estimate.support >= MIN_SUPPORT


@dataclass(frozen=True, slots=True)
class PPISystem:
    """One system: LLM-only and prediction-powered Cover and P@k (``precision`` None: P@k undefined here)."""

    system: str
    cover: PPIEstimate
    precision: PPIEstimate | None


@dataclass(frozen=True, slots=True)
class PPIBoard:
    """The PPI leaderboard and the sample it rests on (systems in the order asked for, else by name)."""

    systems: tuple[PPISystem, ...]
    sample: PPISample
    k: int  # P@k's cut-off
    top_k: int  # Cover's cut-off
    min_rating: int | None  # τ
    level: int  # P@k's relevance level
    label: str
    alpha: float
    precision_note: str | None = None  # why P@k has no estimate (labels undefined), else None

    @property
    def precision_measure(self) -> str:
        return f"P@{self.k}"


def precision_cutoff(request: LeaderboardRequest) -> int:
    """P@k's k: the board's own cut-off when its measure is P@k, else the request's ``top_k`` (Cover's)."""
    measure = request.measure
    if isinstance(measure, TrecMeasure) and measure.name.startswith("P@"):
        return int(measure.name[2:])
    return request.top_k


def ppi_board(
    session: Session,
    collection: Collection,
    request: LeaderboardRequest,
    *,
    order: list[str] | None = None,
    alpha: float = ALPHA,
) -> PPIBoard:
    """The PPI board of ``request``'s settings, from the grader's grades only (overrides never count as f)."""
    data = evaluation_data(session, collection, replace(request, include_overrides=False))
    rule = LabelRule.parse(request.label, min_rating=request.min_rating)
    k = precision_cutoff(request)
    llm = _llm_board(data, request, k, rule)
    sample = labelled_sample(session, collection, data.grades, min_rating=request.min_rating, label=rule)
    effects = cover_effects(data.grades, data.ranking, llm.cover_counts, sample, llm.cover)
    support = cover_support(data.ranking, llm.cover_counts, sample, llm.cover, len(data.grades.pool.query_ids))
    plain = [s.score for s in llm.cover]
    estimates = ppi_linearised(plain, effects, len(llm.units), alpha=alpha, support=support)
    cover = {s.system: within(e) for s, e in zip(llm.cover, estimates, strict=True)}
    precision = _precision_estimates(llm, sample, alpha)
    names = order if order is not None else sorted(cover)
    systems = tuple(PPISystem(s, cover[s], precision.get(s)) for s in names if s in cover)
    level = relevance_level(request.min_rating)
    return PPIBoard(systems, sample, k, request.top_k, request.min_rating, level, request.label, alpha, llm.note)


@dataclass(frozen=True)
class _LLMBoard:
    """What the PPI board reads from the grader's grades alone: the same for every sample, so kept."""

    units: IntArray  # the population: graded entries, sorted
    cover: list[SystemScore]  # the ordinary Cover board (no overall row)
    cover_counts: CoverCounts
    precision: list[SystemScore]  # the ordinary P@k board ([] where P@k is undefined: ``note``)
    weights: Any  # (S, N) scipy.sparse w_su, systems as in ``precision``
    predictions: FloatArray  # f_u = [label_u ≥ l]
    note: str | None


MAX_KEPT = 16  # LLM-only boards kept per process (grades × rankings × settings)
_kept: Kept[str, _LLMBoard] = Kept(MAX_KEPT)


def _llm_board(data: EvaluationData, request: LeaderboardRequest, k: int, rule: LabelRule) -> _LLMBoard:
    """The LLM-only part, kept by content: the rankings' structure token, a digest of the grade cells, settings.

    A leaderboard page re-fetches on every grade event, override and flag; only the sample part
    changes with overrides, and on a DL-sized collection the ordinary P@k evaluation behind this
    part costs ~150 ms. The key is what the grades *are*, so no write can make it stale.
    """
    if not data.structure_token:
        return _build_llm_board(data, request, k, rule)
    grades = data.grades
    digest = hashlib.blake2b(digest_size=20)
    cells = grades.entry * max(len(grades.items), 1) + grades.item
    for column in (cells, grades.rating.astype(np.int32), grades.correct):
        digest.update(np.ascontiguousarray(column).tobytes())
    digest.update(repr((grades.items, grades.is_self_rated, request.min_rating, request.top_k, k, str(rule))).encode())
    key = f"{data.pool.collection_id}:{data.structure_token}:{digest.hexdigest()}"
    return _kept.get_or_compute(key, lambda: _build_llm_board(data, request, k, rule))


def _build_llm_board(data: EvaluationData, request: LeaderboardRequest, k: int, rule: LabelRule) -> _LLMBoard:
    units = np.unique(data.grades.entry)
    table = cover_table(data.grades, data.ranking, min_rating=request.min_rating, top_k=request.top_k)
    cover = [s for s in cover_scores_of(table) if s.system != OVERALL]
    level = relevance_level(request.min_rating)
    counts = cover_counts(data.grades, data.ranking, min_rating=request.min_rating, top_k=request.top_k)
    empty = _LLMBoard(units, cover, counts, [], None, np.zeros(len(units)), None)
    if level < 1:  # every passage would be relevant: trec_eval (pytrec_eval) refuses a level below 1
        return replace(empty, note=f"undefined at threshold {request.min_rating}: P@k needs a relevance level ≥ 1")
    try:
        labels = frame_labels(data.grades, rule)[1]  # in ``units`` order: both are the graded entries, sorted
        scores = score_systems(data, replace(request, measure=TrecMeasure(f"P@{k}")))
    except Invalid as exc:  # only the labels' own refusal: passages without a parsable rating under this rule
        return replace(empty, note=str(exc))
    _, weights = precision_weights(data.grades, data.ranking, k, scores, units)  # rows in ``scores``' order
    return _LLMBoard(units, cover, counts, scores, weights, (labels >= level).astype(np.float64), None)


# ---- P@k ----------------------------------------------------------------------------------------


def top_k_rows(ranking: RankingFrame, k: int) -> IntArray:
    """The ranking rows in each (system, query)'s top k in trec_eval's order (score desc, ties by passage id desc)."""
    pool = ranking.pool
    query = pool.entry_query[ranking.entry]
    by_id = np.empty(pool.n_entries, dtype=np.int64)
    by_id[sorted(range(pool.n_entries), key=pool.passage_ids.__getitem__)] = np.arange(pool.n_entries)
    order = np.lexsort((-by_id[ranking.entry], -ranking.score, query, ranking.system))
    group = ranking.system[order] * len(pool.query_ids) + query[order]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(order) else np.zeros(0, np.int64)
    first = np.repeat(starts, np.diff(np.r_[starts, len(group)]))
    top: IntArray = order[np.arange(len(order)) - first < k]
    return top


def precision_weights(
    grades: GradeFrame, ranking: RankingFrame, k: int, scores: list[SystemScore], units: IntArray
) -> tuple[list[str], sparse.csr_matrix]:
    """(systems, W) with W[s, u] = w_su of the module docstring; units are the graded entries (sorted)."""
    systems = [s.system for s in scores]
    index = {name: i for i, name in enumerate(ranking.systems)}
    queries = {q: i for i, q in enumerate(grades.pool.query_ids)}
    averaged = np.zeros((len(ranking.systems), len(queries)), dtype=bool)
    n_averaged = np.zeros(len(ranking.systems))
    for score in scores:
        s = index[score.system]
        averaged[s, [queries[q] for q in score.per_query]] = True
        n_averaged[s] = len(score.per_query)
    rows = top_k_rows(ranking, k)
    entry, system = ranking.entry[rows], ranking.system[rows]
    unit = np.searchsorted(units, entry)
    graded = (unit < len(units)) & (units[np.minimum(unit, len(units) - 1)] == entry) if len(units) else unit < 0
    keep = graded & averaged[system, grades.pool.entry_query[entry]]
    value = 1.0 / (k * n_averaged[system[keep]])
    matrix = sparse.csr_matrix((value, (system[keep], unit[keep])), shape=(len(ranking.systems), len(units)))
    ordered: sparse.csr_matrix = matrix[[index[name] for name in systems]]
    return systems, ordered


def _precision_estimates(llm: _LLMBoard, sample: PPISample, alpha: float) -> dict[str, PPIEstimate]:
    """P@k per system: ``ppi_linear`` (power-tuned) on the weights, plain = the ordinary P@k board."""
    if not llm.precision:
        return {}
    labelled = np.searchsorted(llm.units, np.array([r.entry for r in sample.rows], dtype=np.int64))
    human = np.array([float(r.relevant) for r in sample.rows])
    estimates = ppi_linear(llm.weights, llm.predictions, labelled, human, alpha=alpha, power_tuning=True)
    return {s.system: within(_on_board(e, s.score)) for s, e in zip(llm.precision, estimates, strict=True)}


def _on_board(estimate: PPIEstimate, plain: float) -> PPIEstimate:
    """The estimate with the board's own plain value (equal to Σ w·f up to summation order, see the docstring)."""
    if estimate.n_labels == 0:
        return replace(estimate, plain=plain, estimate=plain)
    shift = estimate.tuning * (plain - estimate.plain)
    return replace(
        estimate,
        plain=plain,
        estimate=estimate.estimate + shift,
        ci_low=None if estimate.ci_low is None else estimate.ci_low + shift,
        ci_high=None if estimate.ci_high is None else estimate.ci_high + shift,
    )


# ---- Cover --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CoverCounts:
    """The grader's side of Cover, per (system, query) row s·Q + q of T (as in ``cover_table``).

    ``in_top`` T (CSC: a pool entry's column lists the (s, q) rows that have it in their top k),
    ``counts`` K = T·V (K_{s,q,i}: top-k passages covering item i), ``seen`` |Q_q|, ``covered`` c
    per cell.
    """

    in_top: Any
    counts: Any
    seen: IntArray
    covered: BoolArray


def cover_counts(grades: GradeFrame, ranking: RankingFrame, *, min_rating: int | None, top_k: int) -> CoverCounts:
    pool, n_queries = grades.pool, len(grades.pool.query_ids)
    covered = grades.covered(min_rating)
    n_items = max(len(grades.items), 1)
    is_graded = np.zeros(pool.n_entries, dtype=bool)
    is_graded[grades.entry] = True
    top = (ranking.rank <= top_k) & is_graded[ranking.entry]
    group = ranking.system[top] * n_queries + pool.entry_query[ranking.entry[top]]
    in_top = sparse.csr_matrix(
        (np.ones(len(group)), (group, ranking.entry[top])), shape=(len(ranking.systems) * n_queries, pool.n_entries)
    )
    covers = sparse.csr_matrix(
        (np.ones(int(covered.sum())), (grades.entry[covered], grades.item[covered])), shape=(pool.n_entries, n_items)
    )
    return CoverCounts(in_top.tocsc(), (in_top @ covers).tocsr(), _items_seen(grades, n_queries, n_items), covered)


def cover_effects(
    grades: GradeFrame, ranking: RankingFrame, parts: CoverCounts, sample: PPISample, scores: list[SystemScore]
) -> FloatArray:
    """Δ_su (systems in ``scores``' order × labelled rows): Cover's change when row u's covered items are the judges'.

    With c_i and h_i row u's grader and human coverage of item i, the union's size changes by
        Σ_i [K_{s,q,i} − c_i + h_i > 0] − [K_{s,q,i} > 0]
    for every s with u in its top k (K of ``CoverCounts``). All (row, system, item) triples at
    once: ~37 systems × 10 items per labelled row.
    """
    n_queries = len(grades.pool.query_ids)
    effects = np.zeros((len(scores), sample.n_rows))
    if not sample.rows or not scores:
        return effects
    n_items = max(len(grades.items), 1)
    # the labelled rows' cells, grouped by row (rows are in pool order, so ``labelled`` is sorted)
    labelled = np.array([r.entry for r in sample.rows], dtype=np.int64)
    cells = np.flatnonzero(np.isin(grades.entry, labelled))
    cells = cells[np.argsort(grades.entry[cells], kind="stable")]
    cell_row = np.searchsorted(labelled, grades.entry[cells])
    code = {item: i for i, item in enumerate(grades.items)}
    judged = [e * n_items + code[i] for r in sample.rows for e, i in ((r.entry, i) for i in r.covered)]
    human = np.isin(grades.entry[cells] * n_items + grades.item[cells], judged).astype(np.int64)
    model = parts.covered[cells].astype(np.int64)
    # (row j, T's row s·Q + q) for every system s that ranks row j in its top k
    by_entry = parts.in_top
    tops = [by_entry.indices[by_entry.indptr[e] : by_entry.indptr[e + 1]] for e in labelled.tolist()]
    pair_row = np.repeat(np.arange(len(labelled)), [len(t) for t in tops])
    pair_top = np.concatenate(tops).astype(np.int64)
    # expand each pair over its row's cells
    per_row = np.bincount(cell_row, minlength=len(labelled))
    first = np.r_[0, np.cumsum(per_row)[:-1]]
    sizes = per_row[pair_row]
    pair_of = np.repeat(np.arange(len(pair_row)), sizes)
    offset = np.arange(len(pair_of)) - np.repeat(np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    cell = first[pair_row][pair_of] + offset
    k = np.asarray(parts.counts[pair_top[pair_of], grades.item[cells][cell]]).reshape(-1).astype(np.int64)
    after = (k - model[cell] + human[cell]) > 0
    change = np.bincount(pair_of, after.astype(np.int64) - (k > 0), minlength=len(pair_row))
    index = {name: i for i, name in enumerate(ranking.systems)}
    column = np.full(len(ranking.systems), -1)
    column[[index[s.system] for s in scores]] = np.arange(len(scores))
    n_averaged = np.array([len(s.per_query) for s in scores], dtype=np.float64)
    system, query = pair_top // n_queries, pair_top % n_queries
    keep = column[system] >= 0
    target = column[system[keep]]
    effects[target, pair_row[keep]] = change[keep] / (parts.seen[query[keep]] * np.maximum(n_averaged[target], 1.0))
    return effects


def cover_support(
    ranking: RankingFrame, parts: CoverCounts, sample: PPISample, scores: list[SystemScore], n_queries: int
) -> IntArray:
    """Per system (``scores``' order): the labelled rows in its top k for Cover (a row is in one query)."""
    index = {name: i for i, name in enumerate(ranking.systems)}
    counts = np.zeros(len(ranking.systems), dtype=np.int64)
    by_entry = parts.in_top
    for row in sample.rows:
        tops = by_entry.indices[by_entry.indptr[row.entry] : by_entry.indptr[row.entry + 1]]
        counts[np.unique(tops // n_queries)] += 1
    support: IntArray = counts[[index[s.system] for s in scores]]
    return support


def _items_seen(grades: GradeFrame, n_queries: int, n_items: int) -> IntArray:
    """|Q_q|: the distinct items seen in each query's grades (Cover's denominator)."""
    pairs = np.unique(grades.pool.entry_query[grades.entry] * n_items + grades.item)
    counts: IntArray = np.bincount(pairs // n_items, minlength=n_queries)
    return counts


def ppi_json(board: PPIBoard) -> dict[str, Any]:
    """The ``"ppi"`` part of ``leaderboard_analysis_json`` (``--ppi``, ``leaderboard.json?ppi=1``)."""
    sample = board.sample
    return {
        "alpha": board.alpha,
        "cover": {"measure": "cover", "top_k": board.top_k, "min_rating": board.min_rating, "tuning": "none (λ = 1)"},
        "precision": {
            "measure": board.precision_measure,
            "k": board.k,
            "level": board.level,
            "label": board.label,
            "tuning": "PPI++ power tuning, one λ for all systems",
            "note": board.precision_note,
        },
        "sample": {
            "rows": sample.n_rows,
            "cells": sample.n_cells,
            "reached": sample.reached,
            "incomplete": sample.incomplete,
            "population": sample.population,
            "judges": list(sample.judges),
        },
        "systems": [
            {
                "system": s.system,
                "cover": _estimate_json(s.cover),
                "precision": None if s.precision is None else _estimate_json(s.precision),
            }
            for s in board.systems
        ],
    }


def _estimate_json(e: PPIEstimate) -> dict[str, Any]:
    """One estimate; ``support``: labelled rows in the system's top k, ``interval``: why there is none."""
    return {
        "plain": e.plain,
        "ppi": e.estimate,
        "stderr": e.stderr,
        "ci_low": e.ci_low,
        "ci_high": e.ci_high,
        "lambda": e.tuning,
        "support": e.support,
        "labelled": e.n_labels,
        "interval": e.no_interval,
        "reliable": reliable(e),
    }


def support_line(e: PPIEstimate) -> str:
    """'k of n labelled rows fall in this system's top k', and whether its interval can be trusted."""
    line = f"{e.support} of {e.n_labels} labelled rows fall in this system's top k"
    if e.stderr is not None and not reliable(e):
        line += f"; interval unreliable (fewer than {MIN_SUPPORT} rows)"
    return line


def estimate_view(e: PPIEstimate) -> dict[str, Any]:
    """One system's PPI cells on the page: values, the interval or why there is none, the rows behind it."""
    return {
        "plain": e.plain,
        "estimate": e.estimate,
        "ci_low": e.ci_low,
        "ci_high": e.ci_high,
        "support": e.support,
        "n_labels": e.n_labels,
        "unreliable": e.stderr is not None and not reliable(e),
        "no_interval": None if e.no_interval is None else e.no_interval.removeprefix("none: "),
        "support_line": support_line(e),
    }


def sample_line(board: PPIBoard) -> str:
    """The sample in one line, as the page and the table footer print it."""
    sample = board.sample
    return (
        f"{sample.n_rows:,} rows ({sample.n_cells:,} cells) from judges' uniform sample, "
        f"of {sample.population:,} graded rows; {sample.incomplete:,} reached rows incomplete"
    )


def ppi_table(board: PPIBoard) -> Table:
    """The PPI board as a table (``rubric leaderboard --ppi`` in tsv, md or LaTeX)."""
    p = board.precision_measure

    def columns(e: PPIEstimate | None) -> list[Any]:
        return [None] * 5 if e is None else [e.plain, e.estimate, e.ci_low, e.ci_high, e.support]

    rows: list[list[Any]] = [
        [s.system, *columns(s.cover), *columns(s.precision), None if s.precision is None else s.precision.tuning]
        for s in board.systems
    ]
    footer = [
        sample_line(board),
        f"{round((1 - board.alpha) * 100)} % intervals; Cover at top {board.top_k}, "
        f"threshold {'none (any answered item)' if board.min_rating is None else board.min_rating}; "
        f"{p} relevant at label ≥ {board.level} ({board.label}); λ: PPI++ power tuning of {p}, one λ for all "
        "systems (Cover: λ = 1); estimates and intervals clipped to [0, 1]",
        f"support: labelled rows in the system's top k; an interval on fewer than {MIN_SUPPORT} is unreliable; "
        "no interval where those rows show no disagreement",
    ]
    if board.precision_note:
        footer.append(f"{p}: {board.precision_note}")
    return Table(
        title="Prediction-powered estimates (PPI)",
        columns=[
            "system",
            "cover",
            "cover_ppi",
            "cover_ci_low",
            "cover_ci_high",
            "cover_support",
            p,
            f"{p}_ppi",
            f"{p}_ci_low",
            f"{p}_ci_high",
            f"{p}_support",
            "lambda",
        ],
        rows=rows,
        footer=footer,
    )
