"""The agreement analysis: κ tables, the threshold sweep, per-item κ and the judges' overrides against the grader.

What the agreement page shows and ``rubric agreement --sweep`` prints, as one frozen value. The
sweep, per-item κ and override agreement read the snapshot's grade arrays (``GradeFrame``), not
the per-passage dicts: one vectorised pass per quantity.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.agreement.service import agreement_json, as_table, build_agreement_tables
from app.collections import queries, snapshot
from app.collections.queries import GraderRef
from app.collections.service import official_leaderboard
from app.evaluation.agreement import AgreementTable, Confusion, confusion_of
from app.evaluation.correlation import MissingSystemsError, rank_correlation
from app.evaluation.cover import OVERALL
from app.evaluation.formatting import Table, nan_to_none
from app.evaluation.frame import NO_RATING, GradeFrame
from app.evaluation.oversight import Bank
from app.evaluation.types import Judgments
from app.kept import Kept
from app.leaderboards.measures import Cover
from app.leaderboards.service import EvaluationData, LeaderboardRequest, load_evaluation_data, score_systems
from app.models import Collection, RubricVersion
from app.rubrics.service import latest_version

SWEEP = (1, 2, 3, 4, 5)  # the self-rating thresholds τ of the sweep
ITEM_THRESHOLD = 4  # per item and for the overrides: "rated ≥ 4" counts as relevant, as in the paper


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """At threshold τ: κ of "max rating ≥ τ" against "judged relevant" over the judged graded passages,
    and Kendall τ_b of the Cover leaderboard at τ against the official one (None without one)."""

    tau: int
    confusion: Confusion
    kappa: float
    kendall: float | None


@dataclass(frozen=True, slots=True)
class ItemKappa:
    """κ of "item rated ≥ 4" against "judged relevant" over its query's judged graded passages."""

    query_id: str
    item_id: str
    confusion: Confusion
    kappa: float
    item_text: str = ""  # the question as the rubric words it (filled in by ``agreement_analysis``)


@dataclass(frozen=True, slots=True)
class OverrideAgreement:
    """The judges' overrides against the grader's own ratings of the same cells."""

    n: int
    exact: float  # share of cells where the judge's rating equals the grader's
    confusion: Confusion  # "grader ≥ 4" (predicted) against "judge ≥ 4" (relevant)
    kappa: float


@dataclass(frozen=True, slots=True)
class AgreementAnalysis:
    grader: GraderRef
    min_answers: tuple[int, ...]
    min_judgment: int
    tables: tuple[AgreementTable, ...]
    sweep: tuple[SweepPoint, ...]
    per_item: tuple[ItemKappa, ...]  # lowest κ first; only the newest rubric version's items
    overrides: OverrideAgreement | None  # None: no override of a cell the grader rated
    judged_passages: int = 0  # graded passages with a manual judgment: 0 leaves κ, the sweep and per-item empty


def agreement_analysis(
    session: Session,
    collection: Collection,
    *,
    grader_id: int,
    min_answers: tuple[int, ...],
    min_judgment: int,
    official: dict[str, float] | None = None,
) -> AgreementAnalysis:
    """Everything the agreement page shows, for one grader (no overrides applied).

    The κ tables and the sweep count every item the grader graded; the per-item list keeps only the
    newest rubric version's items, with their text (a question removed from the rubric is no row).

    All but the override agreement walks every cell (five Cover leaderboards for the sweep): it is
    kept per (collection, structure, revision, grader, settings, newest rubric version, judgments,
    official ranks), each read as it is now, so a grading batch, a rubric edit or a re-import of
    judgments (which moves no revision) computes afresh. Overrides move no revision and are few: their
    agreement is computed on every call.
    """
    current = snapshot.current(session, collection)  # the revision before the grades: never a stale frame kept
    judgments = snapshot.manual_judgments(session, collection)  # kept; its token moves with every judgment write
    data = load_evaluation_data(session, collection, grader_id=grader_id)
    latest = latest_version(session, collection)
    if official is None:
        official = official_leaderboard(session, collection)
    key = (
        snapshot.database_key(session),
        collection.id,
        data.structure_token,
        current.revision,
        data.grader.id,
        min_answers,
        min_judgment,
        None if latest is None else latest.number,
        judgments.token,
        tuple(sorted(official.items())),
    )
    kept = _kept.get_or_compute(
        key, lambda: _without_overrides(session, data, judgments.by_query, latest, min_answers, min_judgment, official)
    )
    return replace(kept, overrides=override_agreement(data.grades, _overrides(session, data, current.structure)))


MAX_KEPT = 8  # agreement analyses kept per process: small values (tables and a few thousand item rows)
_kept: Kept[tuple[Any, ...], AgreementAnalysis] = Kept(MAX_KEPT)


def clear() -> None:
    """Forget every kept analysis (a test's database copy reuses the seed's structure tokens)."""
    _kept.clear()


def _without_overrides(
    session: Session,
    data: EvaluationData,
    judgments: Judgments,
    latest: RubricVersion | None,
    min_answers: tuple[int, ...],
    min_judgment: int,
    official: dict[str, float],
) -> AgreementAnalysis:
    tables = build_agreement_tables(data.grades, judgments, data.grader.is_self_rated, list(min_answers), min_judgment)
    entries, relevant = _judged(data.grades, judgments, min_judgment)
    return AgreementAnalysis(
        grader=data.grader,
        min_answers=min_answers,
        min_judgment=min_judgment,
        tables=tuple(tables),
        sweep=tuple(_sweep_point(data, entries, relevant, tau, official) for tau in SWEEP),
        per_item=_in_rubric(item_kappas(data.grades, entries, relevant), queries.load_bank(session, latest)),
        overrides=None,
        judged_passages=len(entries),
    )


def _judged(frame: GradeFrame, judgments: Judgments, min_judgment: int) -> tuple[np.ndarray, np.ndarray]:
    """The graded pool entries with a judgment, and per entry whether its best judgment is ≥ ``min_judgment``."""
    graded = np.zeros(frame.pool.n_entries, dtype=bool)
    graded[frame.entry] = True
    position = frame.pool.positions()
    pairs = [
        (position[(q, p)], max(js) >= min_judgment)
        for q, docs in judgments.items()
        for p, js in docs.items()
        if js and (q, p) in position and graded[position[(q, p)]]
    ]
    pairs.sort()
    return np.asarray([e for e, _ in pairs], dtype=np.int64), np.asarray([r for _, r in pairs], dtype=bool)


def _sweep_point(
    data: EvaluationData, entries: np.ndarray, relevant: np.ndarray, tau: int, official: dict[str, float]
) -> SweepPoint:
    best = np.zeros(data.grades.pool.n_entries, dtype=np.int64)
    np.maximum.at(best, data.grades.entry, np.maximum(data.grades.rating, 0))  # a cell without a rating: 0
    confusion = confusion_of(best[entries] >= tau, relevant)
    return SweepPoint(tau, confusion, confusion.kappa(), _cover_kendall(data, tau, official))


def _cover_kendall(data: EvaluationData, tau: int, official: dict[str, float]) -> float | None:
    """Kendall τ_b of the Cover leaderboard at threshold ``tau`` against the official ranks."""
    if not official:
        return None
    scores = score_systems(data, LeaderboardRequest(measure=Cover(), min_rating=tau, bootstrap_samples=0))
    try:
        return rank_correlation({s.system: s.score for s in scores if s.system != OVERALL}, official).kendall
    except MissingSystemsError:
        return None


def item_kappas(frame: GradeFrame, entries: np.ndarray, relevant: np.ndarray) -> tuple[ItemKappa, ...]:
    """Per (query q, item i rated somewhere in q): the confusion over q's judged graded entries e of

        predicted(e) = rating(e, i) ≥ 4 (a missing cell: not predicted),  relevant(e) = best judgment ≥ J,

    from counts: TP, FP from the cells rated ≥ 4; FN = |relevant of q| − TP; TN = |judged of q| − |relevant of q| − FP.
    """
    n_items = max(len(frame.items), 1)
    entry_query = frame.pool.entry_query
    judged = np.zeros(frame.pool.n_entries, dtype=bool)
    is_relevant = np.zeros(frame.pool.n_entries, dtype=bool)
    judged[entries], is_relevant[entries] = True, relevant
    cell_query = entry_query[frame.entry]
    rated = frame.rating != NO_RATING
    keys = np.unique(cell_query[rated] * n_items + frame.item[rated])
    positive = rated & (frame.rating >= ITEM_THRESHOLD) & judged[frame.entry]
    slot = np.searchsorted(keys, cell_query[positive] * n_items + frame.item[positive])
    hits = np.bincount(slot, minlength=len(keys))
    tp = np.bincount(slot, weights=is_relevant[frame.entry[positive]], minlength=len(keys)).astype(np.int64)
    n_queries = len(frame.pool.query_ids)
    judged_q = np.bincount(entry_query[entries], minlength=n_queries)
    relevant_q = np.bincount(entry_query[entries], weights=relevant, minlength=n_queries).astype(np.int64)
    result = []
    for k, key in enumerate(keys.tolist()):
        query = key // n_items
        t, f = int(tp[k]), int(hits[k] - tp[k])
        confusion = Confusion(t, f, int(relevant_q[query]) - t, int(judged_q[query] - relevant_q[query]) - f)
        result.append(ItemKappa(frame.pool.query_ids[query], frame.items[key % n_items], confusion, confusion.kappa()))
    return tuple(sorted(result, key=lambda r: (r.kappa, r.query_id, r.item_id)))


def _in_rubric(items: tuple[ItemKappa, ...], bank: Bank) -> tuple[ItemKappa, ...]:
    """The items of ``bank`` (one rubric version) with their text, in the same order (no bank: all, untexted)."""
    if not bank:
        return items
    texts = {(query_id, entry.item_id): entry.text for query_id, entries in bank.items() for entry in entries}
    return tuple(replace(r, item_text=texts[r.query_id, r.item_id]) for r in items if (r.query_id, r.item_id) in texts)


def _overrides(session: Session, data: EvaluationData, structure: snapshot.Structure) -> dict[tuple[int, str], int]:
    """The judges' overrides as (frame entry, item id) → rating (an entry the snapshot lacks: left out)."""
    overrides = queries.load_overrides(session, data.pool)
    entry_pks = list(overrides)
    positions = structure.positions_of(entry_pks).tolist() if entry_pks else []
    return {
        (position, item): rating
        for entry_pk, position in zip(entry_pks, positions, strict=True)
        if position >= 0
        for item, rating in overrides[entry_pk].items()
    }


def override_agreement(frame: GradeFrame, overrides: dict[tuple[int, str], int]) -> OverrideAgreement | None:
    """Over the overridden cells the grader rated: exact agreement and κ of (grader ≥ 4, judge ≥ 4)."""
    code = {item: i for i, item in enumerate(frame.items)}
    stride = max(len(frame.items), 1)
    human = {e * stride + code[i]: r for (e, i), r in overrides.items() if i in code}
    if not human:
        return None
    cell_key = frame.entry * stride + frame.item
    cells = np.flatnonzero(np.isin(cell_key, list(human)) & (frame.rating != NO_RATING))
    if cells.size == 0:
        return None
    grader = frame.rating[cells]
    judge = np.asarray([human[k] for k in cell_key[cells].tolist()], dtype=np.int64)
    confusion = confusion_of(grader >= ITEM_THRESHOLD, judge >= ITEM_THRESHOLD)
    return OverrideAgreement(int(cells.size), float(np.mean(grader == judge)), confusion, confusion.kappa())


# -- rendering: JSON for the CLI and the web's agreement.json, tables for tsv/md/latex --------------------


def _confusion_json(c: Confusion) -> dict[str, int]:
    return {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn}


def agreement_analysis_json(result: AgreementAnalysis) -> dict[str, Any]:
    """``rubric agreement --sweep --format json`` and the web's ``agreement.json``."""
    return {
        "grader_id": result.grader.id,
        "min_answers": list(result.min_answers),
        "min_judgment": result.min_judgment,
        "tables": agreement_json(list(result.tables)),
        "sweep": [
            {"tau": s.tau, "kappa": s.kappa, "kendall": _number(s.kendall), **_confusion_json(s.confusion)}
            for s in result.sweep
        ],
        "per_item": [
            {
                "query": r.query_id,
                "item_id": r.item_id,
                "item_text": r.item_text,
                "kappa": r.kappa,
                **_confusion_json(r.confusion),
            }
            for r in result.per_item
        ],
        "overrides": None if result.overrides is None else _overrides_json(result.overrides),
    }


def _overrides_json(o: OverrideAgreement) -> dict[str, Any]:
    return {"n": o.n, "exact": o.exact, "kappa": o.kappa, **_confusion_json(o.confusion)}


def _number(value: float | None) -> float | None:
    return None if value is None else nan_to_none(value)


def agreement_analysis_tables(result: AgreementAnalysis) -> list[Table]:
    """The κ tables, then the sweep, the per-item κ and the override agreement as tables."""
    sweep = Table(
        title="Threshold sweep",
        columns=["tau", "kappa", "leaderboard_kendall", "tp", "fp", "fn", "tn"],
        rows=[[s.tau, s.kappa, s.kendall, *_confusion_json(s.confusion).values()] for s in result.sweep],
    )
    items = Table(
        title=f"Per item (rated >= {ITEM_THRESHOLD}), lowest kappa first",
        columns=["query", "item", "item_text", "kappa", "tp", "fp", "fn", "tn"],
        rows=[
            [r.query_id, r.item_id, r.item_text, r.kappa, *_confusion_json(r.confusion).values()]
            for r in result.per_item
        ],
    )
    o = result.overrides
    overrides = Table(
        title="Judges' overrides against the grader",
        columns=["n", "exact", "kappa", "tp", "fp", "fn", "tn"],
        rows=[] if o is None else [[o.n, o.exact, o.kappa, *_confusion_json(o.confusion).values()]],
    )
    return [*(as_table(t) for t in result.tables), sweep, items, overrides]
