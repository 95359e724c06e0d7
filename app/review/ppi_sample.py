"""The human-labelled sample behind the prediction-powered (PPI) leaderboard: which rows judges labelled uniformly.

The sampling unit is a pool entry (a passage *row*): P@k's relevance of a passage is a maximum
over its items and Cover a union over passages, so a single human cell cannot correct a passage.
A row is in the sample when

(a) the uniform sampler *reached* it: it lies in some judge's uniform row order (app/review/queue.py,
    the judge's own stable seed) at or before the last row on which that judge has a not-undone
    ``OverrideEvent`` with ``source == "sample"``. Rows the sampler skipped because they were
    already fully overridden (from the grid, by another judge) count too: leaving them out would
    let the grid's choices, which are not random, decide what the sample holds; and
(b) every item of the row in the board's item set (the board's grade cells of that passage) has a
    current ``GradeOverride``.

A reached row with a cell still unlabelled is left out and counted (``incomplete``): it is
non-response, which the uniform design cannot correct for; the board reports it.

Why several judges may each follow their own seed: each judge's order is a uniform random order
of the rows, drawn independently of the labels, and each judge stops at a point of their own
choosing. The union of the prefixes is then exchangeable: any permutation of the rows leaves its
distribution unchanged, so given its size every set of rows is equally likely (a uniform sample
without replacement). Stopping must not depend on the labels seen (do not stop "when it looks good").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections import queries, snapshot
from app.errors import Conflict
from app.evaluation.frame import BoolArray, GradeFrame, IntArray, PoolIndex
from app.evaluation.qrels import LabelRule, frame_labels
from app.models import Collection, OverrideEvent
from app.review.queue import judge_seed, row_places, structure_row_ids


@dataclass(frozen=True, slots=True)
class LabelledRow:
    """One passage row every item of which a judge graded: the human labels PPI compares the grader with."""

    entry: int  # the row's position in the board frame's pool
    pool_entry: int  # its pool entry pk
    query_id: str
    passage_id: str
    covered: frozenset[str]  # items the judges' grades cover (rating ≥ τ)
    relevant: bool  # the row's label under the board's label rule is ≥ the relevance level
    cells: int


@dataclass(frozen=True, slots=True)
class PPISample:
    """The labelled rows (pool order), and what the uniform samplers reached without a full label."""

    rows: tuple[LabelledRow, ...]
    reached: int  # rows of the board's population some judge's uniform sample reached
    incomplete: int  # reached rows with an item still without a judge's grade (left out)
    population: int  # N: rows with at least one grade cell on the board
    judges: tuple[str, ...]  # judges with uniform-sample actions, sorted

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_cells(self) -> int:
        return sum(r.cells for r in self.rows)


def relevance_level(min_rating: int | None) -> int:
    """The binary relevance level of P@k: trec_eval's ``-l``, the threshold τ, 1 when unset (trec_eval's default)."""
    return 1 if min_rating is None else min_rating


def reached_rows(session: Session, collection: Collection, pool: PoolIndex) -> tuple[BoolArray, tuple[str, ...]]:
    """Per entry position of ``pool`` (the current one): whether some judge's uniform sample reached it; the judges.

    Judge j with sample actions on rows R_j (undone actions left out) has reached the rows whose
    place in j's order is ≤ max_{r ∈ R_j} place_j(r).
    """
    structure = snapshot.current(session, collection).structure
    if structure.index.passage_ids != pool.passage_ids:
        raise Conflict("the collection's pool changed while the board was computed; reload")
    n_entries = pool.n_entries
    events = session.execute(
        select(OverrideEvent.judge, OverrideEvent.pool_entry_pk)
        .where(
            OverrideEvent.collection_id == collection.id,
            OverrideEvent.source == "sample",
            OverrideEvent.undone.is_(False),
        )
        .distinct()
    ).all()
    by_judge: dict[str, list[int]] = {}
    for judge, pk in events:
        if pk in structure.position:
            by_judge.setdefault(judge, []).append(structure.position[pk])
    reached = np.zeros(n_entries, dtype=bool)
    if not by_judge:
        return reached, ()
    ids = structure_row_ids(session, structure)
    for judge, entries in by_judge.items():
        places = row_places(ids, judge_seed(collection.name, judge))
        reached |= places <= places[entries].max()
    return reached, tuple(sorted(by_judge))


def labelled_sample(
    session: Session, collection: Collection, grades: GradeFrame, *, min_rating: int | None, label: LabelRule
) -> PPISample:
    """The rows of ``grades`` (the board's grader cells, without overrides) that judges labelled uniformly.

    Each labelled row's human labels are the grader's cells with the judges' ratings put in
    (``GradeFrame.with_overrides``, as the board's "include overrides" does): its covered items at
    ``min_rating`` and its label under ``label``, relevant when ≥ ``relevance_level(min_rating)``.
    """
    n_entries = grades.pool.n_entries
    in_population = np.zeros(n_entries, dtype=bool)
    in_population[grades.entry] = True
    reached, judges = reached_rows(session, collection, grades.pool)
    reached &= in_population
    if not reached.any():
        return PPISample((), 0, 0, int(in_population.sum()), judges)
    structure = snapshot.current(session, collection).structure
    human, overridden = _human_cells(session, structure, grades, reached)
    missing = np.zeros(n_entries, dtype=bool)
    missing[grades.entry[reached[grades.entry] & ~overridden]] = True
    complete = reached & ~missing
    rows = _labelled_rows(grades, human, complete, _entry_pks(structure), min_rating=min_rating, label=label)
    return PPISample(rows, int(reached.sum()), int((reached & missing).sum()), int(in_population.sum()), judges)


def _entry_pks(structure: snapshot.Structure) -> IntArray:
    pks = np.zeros(structure.index.n_entries, dtype=np.int64)
    pks[list(structure.position.values())] = list(structure.position.keys())
    return pks


def _human_cells(
    session: Session, structure: snapshot.Structure, grades: GradeFrame, reached: BoolArray
) -> tuple[GradeFrame, BoolArray]:
    """The frame with the judges' ratings on the reached rows, and per cell whether a judge rated it."""
    position = structure.position
    ratings = {
        (position[pk], item): rating
        for pk, by_item in queries.load_overrides(session, structure.pool).items()
        if pk in position and reached[position[pk]]
        for item, rating in by_item.items()
    }
    code = {item: i for i, item in enumerate(grades.items)}
    stride = max(len(grades.items), 1)
    keys = np.array([e * stride + code[i] for e, i in ratings if i in code], dtype=np.int64)
    overridden: BoolArray = np.isin(grades.entry * stride + grades.item, keys)
    return grades.with_overrides(ratings), overridden


def _labelled_rows(
    grades: GradeFrame,
    human: GradeFrame,
    complete: BoolArray,
    pks: IntArray,
    *,
    min_rating: int | None,
    label: LabelRule,
) -> tuple[LabelledRow, ...]:
    cells = complete[human.entry]
    if not cells.any():
        return ()
    rows = human.select(cells)
    entries, labels = frame_labels(rows, label)
    covered = rows.covered(min_rating)
    level = relevance_level(min_rating)
    pool = grades.pool
    result = []
    for e, row_label in zip(entries.tolist(), labels.tolist(), strict=True):
        mine = rows.entry == e
        result.append(
            LabelledRow(
                entry=e,
                pool_entry=int(pks[e]),
                query_id=pool.query_ids[int(pool.entry_query[e])],
                passage_id=pool.passage_ids[e],
                covered=frozenset(rows.items[i] for i in rows.item[mine & covered].tolist()),
                relevant=row_label >= level,
                cells=int(mine.sum()),
            )
        )
    return tuple(result)
