"""Columnar (numpy) forms of a graded pool and of the systems' rankings.

The leaderboard recomputes from these instead of from nested dicts of objects: a DL-sized
collection has ~200k grade cells and ~300k ranking rows, and walking them as Python objects costs
seconds, while the array operations below cost milliseconds. ``GradedPool`` and ``Rankings``
(app.evaluation.types) remain the readable interchange forms; ``from_graded`` / ``to_graded`` and
``from_rankings`` / ``to_rankings`` convert both ways without loss.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from app.errors import Invalid
from app.evaluation.types import GradedPool, PassageGrade, RankedPassage, Rankings

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NO_RATING = -1  # a cell whose answer carried no parsable self-rating
# system → query → passage → score, the run form pytrec_eval takes
Runs = Mapping[str, Mapping[str, Mapping[str, float]]]


def int_array(values: list[int]) -> IntArray:
    return np.asarray(values, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class PoolIndex:
    """The pool as positions: entry e is passage ``passage_ids[e]`` of query ``query_ids[entry_query[e]]``.

    Entries are in pool order (query by query), which is the order every result is reported in.
    """

    query_ids: tuple[str, ...]
    entry_query: IntArray
    passage_ids: tuple[str, ...]

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> PoolIndex:
        """From (query id, passage id) pairs in pool order; repeated pairs are kept once."""
        query_pos: dict[str, int] = {}
        entry_query: list[int] = []
        passages: list[str] = []
        for query_id, passage_id in dict.fromkeys(pairs):
            entry_query.append(query_pos.setdefault(query_id, len(query_pos)))
            passages.append(passage_id)
        return cls(tuple(query_pos), int_array(entry_query), tuple(passages))

    @property
    def n_entries(self) -> int:
        return len(self.passage_ids)

    def positions(self) -> dict[tuple[str, str], int]:
        """(query id, passage id) → entry position."""
        return {
            (self.query_ids[q], p): e
            for e, (q, p) in enumerate(zip(self.entry_query.tolist(), self.passage_ids, strict=True))
        }


@dataclass(frozen=True, slots=True)
class GradeFrame:
    """One grader's cells: cell c grades entry ``entry[c]`` against item ``items[item[c]]``.

    ``rating[c]`` is the self-rating (NO_RATING if none), ``correct[c]`` whether the item counts as
    answered. At most one cell per (entry, item).
    """

    pool: PoolIndex
    items: tuple[str, ...]
    entry: IntArray
    item: IntArray
    rating: IntArray
    correct: BoolArray
    is_self_rated: bool = True

    def select(self, keep: BoolArray) -> GradeFrame:
        return replace(
            self, entry=self.entry[keep], item=self.item[keep], rating=self.rating[keep], correct=self.correct[keep]
        )

    def restrict_items(self, allowed: Container[str]) -> GradeFrame:
        """Only the cells of ``allowed`` items (a rubric version); direct grades (item "") always stay."""
        item_allowed = np.array([not item or item in allowed for item in self.items], dtype=bool)
        return self.select(item_allowed[self.item])

    def without_item(self, query_id: str, item_id: str) -> GradeFrame:
        """The frame with one query's item removed, as if it had never been in the bank."""
        if item_id not in self.items or query_id not in self.pool.query_ids:
            return self
        query = self.pool.query_ids.index(query_id)
        drop = (self.item == self.items.index(item_id)) & (self.pool.entry_query[self.entry] == query)
        return self.select(~drop)

    def with_overrides(self, overrides: Mapping[tuple[int, str], int]) -> GradeFrame:
        """Judges' ratings replace the grader's on the cells they name: (entry, item id) → rating.

        An overridden cell counts as answered iff its rating is > 0; overrides of cells the grader
        never graded are ignored.
        """
        if not overrides:
            return self
        item_code = {item: i for i, item in enumerate(self.items)}
        stride = len(self.items)
        human = {e * stride + item_code[i]: r for (e, i), r in overrides.items() if i in item_code}
        cell_key = self.entry * stride + self.item
        cells = np.flatnonzero(np.isin(cell_key, list(human)))
        ratings = np.asarray([human[k] for k in cell_key[cells].tolist()], dtype=np.int64)
        rating, correct = self.rating.copy(), self.correct.copy()
        rating[cells], correct[cells] = ratings, ratings > 0
        return replace(self, rating=rating, correct=correct)

    def covered(self, min_rating: int | None) -> BoolArray:
        """Per cell, i ∈ cov_τ(p): rating ≥ τ for self-rated grades with τ given, else answered."""
        if min_rating is not None and self.is_self_rated:
            result: BoolArray = (self.rating != NO_RATING) & (self.rating >= min_rating)
            return result
        return self.correct

    @classmethod
    def from_graded(cls, graded: GradedPool, pool: PoolIndex | None = None) -> GradeFrame:
        """From the dict form; ``pool`` defaults to the graded passages in their order."""
        pool = pool or PoolIndex.from_pairs((q, p) for q, docs in graded.items() for p in docs)
        position = pool.positions()
        item_code: dict[str, int] = {}
        columns: tuple[list[int], list[int], list[int], list[bool]] = ([], [], [], [])
        flags = {g.is_self_rated for docs in graded.values() for g in docs.values()}
        if len(flags) > 1:
            raise Invalid("a graded pool mixes self-rated and boolean grades")
        for query_id, docs in graded.items():
            for passage_id, grade in docs.items():
                entry = position[(query_id, passage_id)]
                for item_id in sorted(grade.item_ids):
                    columns[0].append(entry)
                    columns[1].append(item_code.setdefault(item_id, len(item_code)))
                    columns[2].append(grade.ratings.get(item_id, NO_RATING))
                    columns[3].append(item_id in grade.correct)
        return cls(
            pool,
            tuple(item_code),
            int_array(columns[0]),
            int_array(columns[1]),
            int_array(columns[2]),
            np.asarray(columns[3], dtype=bool),
            is_self_rated=flags.pop() if flags else True,
        )

    def to_graded(self) -> dict[str, dict[str, PassageGrade]]:
        """The dict form: query → passage → PassageGrade, graded passages in pool order."""
        order = np.argsort(self.entry, kind="stable")
        entries, starts = np.unique(self.entry[order], return_index=True)
        items = [self.items[i] for i in self.item[order].tolist()]
        ratings, correct = self.rating[order].tolist(), self.correct[order].tolist()
        result: dict[str, dict[str, PassageGrade]] = {}
        for entry, start, end in zip(
            entries.tolist(), starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True
        ):
            cells = range(start, end)
            query_id = self.pool.query_ids[int(self.pool.entry_query[entry])]
            result.setdefault(query_id, {})[self.pool.passage_ids[entry]] = PassageGrade(
                {items[c]: ratings[c] for c in cells if ratings[c] != NO_RATING},
                frozenset(items[c] for c in cells if correct[c]),
                frozenset(items[c] for c in cells),
                self.is_self_rated,
            )
        return result


@dataclass(frozen=True)
class RankingFrame:
    """Ranking row r: system ``systems[system[r]]`` ranks entry ``entry[r]`` at ``rank[r]`` with ``score[r]``.

    The snapshot keeps ``system``, ``entry`` and ``rank`` as int32 (a 10× collection has 3.2M rows);
    ``score`` stays float64, as trec_eval's order depends on it. Index arithmetic that could pass
    2³¹ widens to int64 first.
    """

    pool: PoolIndex
    systems: tuple[str, ...]
    system: IntArray
    entry: IntArray
    rank: IntArray
    score: FloatArray
    # derived forms (runs per depth, the dict form), built once per frame; the frame itself never changes
    _derived: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def runs(self, depth: int | None = None) -> dict[str, dict[str, dict[str, float]]]:
        """system → query → passage → score; with ``depth``, each query cut to its top ``depth``.

        The cut follows trec_eval's own order (score descending, ties by passage id descending),
        so a measure that reads only the top k of a ranking (P@k, nDCG@k, …) is unchanged by a
        cut at depth k.
        """
        key = ("runs", depth)
        if key not in self._derived:
            self._derived[key] = self._build_runs(depth)
        runs: dict[str, dict[str, dict[str, float]]] = self._derived[key]
        return runs

    def trec_order(self) -> IntArray:
        """Row positions in trec_eval's order: by system, query, score descending, passage id descending.

        The snapshot stores its rows in this order already (one sort per structure, persisted with
        it), so the check below usually spares a 3.2M-row lexsort on a 10× collection's cold path.
        """
        query = self.pool.entry_query[self.entry]
        if self._in_trec_order(query):
            return np.arange(len(self.entry), dtype=np.int64)
        return self._trec_sort(query)

    def _trec_sort(self, query: IntArray) -> IntArray:
        by_id = np.empty(self.pool.n_entries, dtype=np.int64)
        by_id[sorted(range(self.pool.n_entries), key=self.pool.passage_ids.__getitem__)] = np.arange(
            self.pool.n_entries
        )
        order: IntArray = np.lexsort((-by_id[self.entry], -self.score, query, self.system))
        return order

    def _in_trec_order(self, query: IntArray) -> bool:
        """Whether the rows are in ``trec_order`` as they stand (exact: ties on score compare passage ids).

        ``query`` is each row's query code.
        """
        system, score = self.system, self.score
        if len(system) < 2:
            return True
        same_system = system[1:] == system[:-1]
        same_query = same_system & (query[1:] == query[:-1])
        ascending = (system[1:] > system[:-1]) | (same_system & (query[1:] > query[:-1]))
        descending = same_query & (score[1:] < score[:-1])
        tied = same_query & (score[1:] == score[:-1])
        if not bool(np.all(ascending | descending | tied)):
            return False
        at = np.flatnonzero(tied)
        passages = self.pool.passage_ids
        pairs = zip(self.entry[at].tolist(), self.entry[at + 1].tolist(), strict=True)
        return all(passages[first] > passages[second] for first, second in pairs)

    def _build_runs(self, depth: int | None) -> dict[str, dict[str, dict[str, float]]]:
        result: dict[str, dict[str, dict[str, float]]] = {name: {} for name in self.systems}
        if len(self.entry) == 0:
            return result
        system, entry, score = self.system, self.entry, self.score
        query = self.pool.entry_query[entry]
        if not self._in_trec_order(query):  # the snapshot's rows never take this branch
            order = self._trec_sort(query)
            system, entry, score, query = system[order], entry[order], score[order], query[order]
        # one group per (system, query): a stretch of rows, best first; the cut keeps each stretch's head
        starts = np.flatnonzero(np.r_[True, (system[1:] != system[:-1]) | (query[1:] != query[:-1])])
        lengths = np.diff(np.r_[starts, len(entry)])
        if depth is not None:
            lengths = np.minimum(lengths, depth)
        ends = np.cumsum(lengths)
        kept = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
        passages = np.asarray(self.pool.passage_ids, dtype=object)[entry[kept]]
        scores = score[kept]
        # One small dict(zip(…)) per group from array slices: at 10× DL (31,860 groups of 20 of 3.2M
        # rows) a step per row took 1.5 s, and lists of all 637k kept rows (walked by every garbage
        # collection while they live) made this step about twice as slow as these slices.
        bounds = [0, *ends.tolist()]
        groups = [
            dict(zip(passages[start:end].tolist(), scores[start:end].tolist(), strict=True))
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        group_query = [self.pool.query_ids[q] for q in query[starts].tolist()]
        group_system = system[starts]
        by_system = np.flatnonzero(np.r_[True, group_system[1:] != group_system[:-1], True]).tolist()
        for first, last in zip(by_system[:-1], by_system[1:], strict=True):
            result[self.systems[int(group_system[first])]] = dict(
                zip(group_query[first:last], groups[first:last], strict=True)
            )
        return result

    def to_rankings(self) -> Rankings:
        """The dict form: system → query → passage → (rank, score), every system present."""
        if "rankings" not in self._derived:
            result: dict[str, dict[str, dict[str, RankedPassage]]] = {name: {} for name in self.systems}
            queries, passages = self.pool.query_ids, self.pool.passage_ids
            columns = zip(
                self.system.tolist(), self.entry.tolist(), self.rank.tolist(), self.score.tolist(), strict=True
            )
            for s, e, rank, score in columns:
                by_query = result[self.systems[s]].setdefault(queries[int(self.pool.entry_query[e])], {})
                by_query[passages[e]] = RankedPassage(rank, score)
            self._derived["rankings"] = result
        rankings: Rankings = self._derived["rankings"]
        return rankings

    @classmethod
    def from_rankings(cls, rankings: Rankings, pool: PoolIndex) -> RankingFrame:
        """From the dict form; every ranked (query, passage) must be in ``pool``."""
        position = pool.positions()
        columns: tuple[list[int], list[int], list[int], list[float]] = ([], [], [], [])
        for s, by_query in enumerate(rankings.values()):
            for query_id, ranked in by_query.items():
                for passage_id, entry in ranked.items():
                    columns[0].append(s)
                    columns[1].append(position[(query_id, passage_id)])
                    columns[2].append(entry.rank)
                    columns[3].append(entry.score)
        return cls(
            pool,
            tuple(rankings),
            int_array(columns[0]),
            int_array(columns[1]),
            int_array(columns[2]),
            np.asarray(columns[3], dtype=np.float64),
        )


def frames_of(graded: GradedPool, rankings: Rankings) -> tuple[GradeFrame, RankingFrame]:
    """Both frames over one pool: the graded passages first, then passages only the systems ranked."""
    pairs = [(q, p) for q, docs in graded.items() for p in docs]
    pairs += [(q, p) for by_query in rankings.values() for q, ranked in by_query.items() for p in ranked]
    pool = PoolIndex.from_pairs(pairs)
    return GradeFrame.from_graded(graded, pool), RankingFrame.from_rankings(rankings, pool)
