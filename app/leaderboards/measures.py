"""The measure registry: a leaderboard measure is a value with a canonical name, parsed once at the boundary.

``parse("P.20")`` and ``parse("p@20")`` are the same ``TrecMeasure("P@20")``; ``parse("N-Cover")``
is ``Cover(normalized=True)``. Past the boundary nothing re-classifies a string: code asks
``isinstance(measure, Cover)``. The families below drive the CLI ``--measure`` help, the web's
measure menu and the validation message, so the three never disagree (ir_measures' idea: a
measure is a value whose ``str`` is its canonical name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.errors import Invalid

if TYPE_CHECKING:  # the registry is read by the CLI's help text: ir_measures loads on the first parse only
    import ir_measures


@dataclass(frozen=True, slots=True)
class Cover:
    """Cover (spec §2.3): the mean over queries of the share of items covered in a system's top k.

    ``normalized`` (n-Cover) divides by the items any system covers instead of every item.
    """

    normalized: bool = False

    @property
    def name(self) -> str:
        return "n-cover" if self.normalized else "cover"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class TrecMeasure:
    """A trec_eval measure on the derived qrels, by its canonical name (``P@20``, ``NDCG@10``, ``MAP``…).

    The relevance level is a setting of the request, not of the measure: ``at(level)`` is the
    ir_measures measure at trec_eval's ``-l`` level (default 1), e.g. ``P(rel=4)@20``.
    """

    name: str

    def at(self, level: int | None) -> ir_measures.Measure:
        from app.evaluation.trec import parse_measure

        return parse_measure(self.name, min_rating=level)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class WeightedCover:
    """Cover where each item counts with its importance weight (app/evaluation/nuggets.py:weighted_cover_table)."""

    normalized: bool = False

    @property
    def name(self) -> str:
        return "n-cover-weighted" if self.normalized else "cover-weighted"

    def __str__(self) -> str:
        return self.name


NUGGET_SUBSETS = ("all", "vital", "weighted")
MAX_SUPPORT_RATING = 5


@dataclass(frozen=True, slots=True)
class NuggetScore:
    """An AutoNuggetizer score (app/evaluation/nuggets.py): All, Vital or Weighted, strict or not.

    ``support``/``partial`` are the self-rating scale's cuts (a rating ≥ support supports the
    nugget, ≥ partial supports it partially); a non-default scale is part of the name:
    ``nugget-vital(support=5,partial=3)``.
    """

    subset: str
    strict: bool = False
    support: int = 4
    partial: int = 3

    def __post_init__(self) -> None:
        if self.subset not in NUGGET_SUBSETS:
            raise Invalid(f"nugget score must be one of {', '.join(NUGGET_SUBSETS)}, got {self.subset!r}")
        if not 0 <= self.partial <= self.support <= MAX_SUPPORT_RATING:
            raise Invalid(
                f"the support scale needs 0 ≤ partial ≤ support ≤ {MAX_SUPPORT_RATING}, "
                f"got support={self.support}, partial={self.partial}"
            )

    @property
    def name(self) -> str:
        base = f"nugget-{'strict-' if self.strict else ''}{self.subset}"
        if (self.support, self.partial) == (4, 3):
            return base
        return f"{base}(support={self.support},partial={self.partial})"

    def __str__(self) -> str:
        return self.name


Measure = Cover | TrecMeasure | WeightedCover | NuggetScore


@dataclass(frozen=True, slots=True)
class Family:
    """One family of measures: its canonical spelling, the spellings accepted for it, and help text."""

    name: str  # canonical, with ``@k`` appended when a cut-off is given
    aliases: tuple[str, ...]  # lower case, as trec_eval and ir_measures spell them
    usage: str  # how the help shows it
    help: str
    takes_cutoff: bool


FAMILIES: tuple[Family, ...] = (
    Family("cover", ("cover",), "cover", "share of a query's items covered in a system's top k", False),
    Family("n-cover", ("n-cover",), "n-cover", "Cover over the items any system covers", False),
    Family("cover-weighted", ("cover-weighted",), "cover-weighted", "Cover, each item counted by its weight", False),
    Family("n-cover-weighted", ("n-cover-weighted",), "n-cover-weighted", "n-Cover with item weights", False),
    Family(
        "nugget-all",
        ("nugget-all", "nugget-vital", "nugget-weighted"),
        "nugget-[strict-]all|vital|weighted[(support=S,partial=P)]",
        "AutoNuggetizer score of the top-k response (partial support 0.5; strict: 0)",
        False,
    ),
    Family("P", ("p", "precision"), "P@k", "precision at k", True),
    Family("Recall", ("recall", "r"), "Recall@k", "recall at k", True),
    Family("MAP", ("map", "ap"), "MAP", "mean average precision", True),
    Family("NDCG", ("ndcg", "ndcg_cut"), "NDCG@k", "nDCG (graded labels as gains), optionally at k", True),
    Family("RR", ("rr", "mrr", "recip_rank"), "RR", "reciprocal rank of the first relevant passage", True),
    Family("R-prec", ("r-prec", "rprec"), "R-prec", "precision at R, the number of relevant passages", False),
)
MENU: tuple[Measure, ...] = (
    Cover(False),
    Cover(True),
    TrecMeasure("P@20"),
    TrecMeasure("NDCG@10"),
    TrecMeasure("MAP"),
    TrecMeasure("RR"),
    TrecMeasure("R-prec"),
    TrecMeasure("Recall@100"),
    NuggetScore("all"),
    NuggetScore("vital"),
    NuggetScore("vital", strict=True),
    NuggetScore("weighted"),
    WeightedCover(False),
)
DEFAULT: Measure = Cover(False)
_ALIASES = {alias: family for family in FAMILIES for alias in family.aliases}
_NUGGET = re.compile(
    r"^nugget-(?P<strict>strict-)?(?P<subset>all|vital|weighted)(?:\(support=(?P<support>\d),partial=(?P<partial>\d)\))?$"
)
_NAME = re.compile(r"^(?P<name>[A-Za-z_\-]+?)(?:[@._](?P<k>\d{1,6}))?$")


def families_text() -> str:
    """The accepted spellings, for help and error messages: ``cover, n-cover, P@k, …``."""
    return ", ".join(f.usage for f in FAMILIES) + " or an ir_measures name"


HELP = f"Measure: {families_text()}."


def parse(text: str | Measure, *, min_rating: int | None = None) -> Measure:
    """The measure ``text`` names, else ``Invalid`` naming ``measure`` and listing the families.

    A trec measure is parsed once here (app/evaluation/trec.py, which bounds its cut-off and
    parameters) at ``min_rating``, so a bad name or level is refused at the boundary.
    """
    measure = text if isinstance(text, Cover | TrecMeasure | WeightedCover | NuggetScore) else _named(text)
    if isinstance(measure, TrecMeasure):
        measure.at(min_rating)  # validation: raises Invalid for an unknown name or an unbounded parameter
    return measure


def _named(text: str) -> Measure:
    if not isinstance(text, str) or not text.strip():
        raise Invalid(f"measure is required: {families_text()}")
    key = text.strip().lower()
    if key in ("cover", "n-cover"):
        return Cover(normalized=key == "n-cover")
    if key in ("cover-weighted", "n-cover-weighted"):
        return WeightedCover(normalized=key == "n-cover-weighted")
    nugget = _NUGGET.match(key)
    if nugget:
        scale = (int(nugget["support"]), int(nugget["partial"])) if nugget["support"] else (4, 3)
        return NuggetScore(nugget["subset"], strict=bool(nugget["strict"]), support=scale[0], partial=scale[1])
    match = _NAME.match(text.strip())
    family = _ALIASES.get(match["name"].lower()) if match else None
    if match and family is not None and family.takes_cutoff:
        return TrecMeasure(f"{family.name}@{int(match['k'])}" if match["k"] else family.name)
    if match and family is not None and not match["k"]:
        return TrecMeasure(family.name)
    from app.evaluation.trec import parse_measure

    parsed = parse_measure(text)  # any other ir_measures name, by its own canonical spelling
    return TrecMeasure(str(parsed))
