"""The plain data the evaluation functions work on. Ids are strings, as in TREC files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PassageGrade:
    """One passage's grade for one query under one grader (the reference's single ExamGrades).

    ``ratings`` maps item id → self-rating (empty for boolean prompts); ``correct`` holds the ids
    counted as answered (for self-rated prompts: rating ≥ 1); ``item_ids`` every id graded.
    """

    ratings: Mapping[str, int]
    correct: frozenset[str]
    item_ids: frozenset[str]
    is_self_rated: bool = True


@dataclass(frozen=True, slots=True)
class RankedPassage:
    rank: int
    score: float


# query id → passage id → grade
GradedPool = Mapping[str, Mapping[str, PassageGrade]]
# system → query id → passage id → (rank, score)
Rankings = Mapping[str, Mapping[str, Mapping[str, RankedPassage]]]
# query id → passage id → relevance grade(s)
Judgments = Mapping[str, Mapping[str, list[int]]]
# query id → passage id → integer label
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class SystemScore:
    system: str
    score: float
    stderr: float
    per_query: Mapping[str, float]
    ci_low: float | None = None
    ci_high: float | None = None
    official_rank: float | None = None


@dataclass(frozen=True, slots=True)
class Correlation:
    spearman: float
    kendall: float
    tau_ap: float
    n_systems: int


@dataclass(slots=True)
class Leaderboard:
    measure: str
    systems: list[SystemScore]
    correlation: Correlation | None = None
    settings: dict[str, object] = field(default_factory=dict)
