"""Simulation: how close does a prediction-powered P@k board get to the judgment-based one on dl19-dev?

dl19-dev is imported into a temporary SQLite database. The LLM's relevance of a graded passage row
is the collection's default grader under the board's label rule (max self-rating ≥ τ); a "human"
labels a uniform sample of n rows without replacement, and the label is the TREC judgment, relevant
iff judgment ≥ 2 (the TREC DL convention for binary measures). For n = 50, 100, 200, 400, 800 and 20 seeds
each, three boards are compared with the judgment-based board (P@k on the full TREC judgments,
through the project's trec path) by Kendall's τ_b (app/evaluation/correlation.py:rank_correlation):

(a) LLM-only: P@k on the grader's derived qrels (the ordinary leaderboard),
(b) PPI: ``ppi_linear`` with PPI++ power tuning (one λ shared by all systems), and with λ = 1,
(c) classical: the human-only expansion estimate from the same n rows (λ = 0, ``classical_linear``).

Every estimate is taken as the leaderboard shows it: clipped to [0, 1] with its interval
(``within``), and without an interval where the sample saw no variation in a system's top k. It
also reports how often the 95 % intervals hold the judgment-based value, over systems (a system
without an interval counts as a miss), the share of systems without one, the same rate among the
systems that have one, and the share whose interval rests on ≥ 10 labelled rows in their top k. The P@k weights are read off the project's own frames: each system's trec_eval-ordered
top k (``RankingFrame.runs(k)``) and the queries trec_eval averages it over (``per_query_values``);
the script asserts that Σ_u w_su·f_u equals the leaderboard's P@k (``score_systems``).

Run: ``.venv/bin/python bench/ppi_simulation.py [--min-rating 4] [--seeds 20]`` (about 15 s).
Prints a Markdown table for docs/ppi.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import ir_measures
import numpy as np
from scipy import sparse
from sqlalchemy.orm import Session

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for _name in list(os.environ):  # the temporary database below, whatever the caller's environment says
    if _name.startswith("RUBRIC_"):
        del os.environ[_name]

from app.collections import queries  # noqa: E402
from app.collections.service import ensure_collection, import_interchange, import_queries  # noqa: E402
from app.db import make_engine, session_scope  # noqa: E402
from app.evaluation.correlation import rank_correlation, scores_to_ranks  # noqa: E402
from app.evaluation.frame import IntArray  # noqa: E402
from app.evaluation.ppi import PPIEstimate, classical_linear, ppi_linear, within  # noqa: E402
from app.evaluation.qrels import LabelRule, frame_labels  # noqa: E402
from app.evaluation.trec import per_query_values, top_depth, trec_scores  # noqa: E402
from app.evaluation.types import Qrels  # noqa: E402
from app.leaderboards import measures  # noqa: E402
from app.leaderboards.measures import TrecMeasure  # noqa: E402
from app.leaderboards.ppi import MIN_SUPPORT  # noqa: E402
from app.leaderboards.service import EvaluationData, LeaderboardRequest, evaluation_data, score_systems  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.rubrics.service import import_banks  # noqa: E402

DATA = Path("/work/shared/data/dl19-dev")
RELEVANT_JUDGMENT = 2  # TREC DL: binary measures count judgments ≥ 2 as relevant
SAMPLE_SIZES = (50, 100, 200, 400, 800)
CUTOFFS = (10, 20)


@dataclass(frozen=True)
class Board:
    """One P@k board as the linear form θ_s = Σ_u w_su·label_u over the N graded rows."""

    systems: tuple[str, ...]
    weights: sparse.csr_matrix  # (S, N)
    predicted: np.ndarray  # (N,) the LLM's binary relevance f_u
    human: np.ndarray  # (N,) the judgment-based relevance Y_u
    llm_board: dict[str, float]  # the ordinary leaderboard's P@k (score_systems)
    llm_stderr: dict[str, float]  # its stderr over queries
    judged_board: dict[str, float]  # P@k on the full TREC judgments (trec_scores)


def import_dev(url: str) -> None:
    upgrade(url)
    with session_scope(make_engine(url)) as session:
        collection = ensure_collection(session, "dl19")
        import_queries(session, collection, DATA / "queries.json")
        import_interchange(session, collection, DATA / "passages-graded.jsonl.gz")
        import_banks(session, collection, [DATA / "questions.jsonl.gz"])


def precision_at(k: int, level: int | None) -> ir_measures.Measure:
    """P@k at relevance level ``level`` (trec_eval -l), as the leaderboard parses it."""
    measure = measures.parse(f"P@{k}")
    assert isinstance(measure, TrecMeasure)
    return measure.at(level)


def precision_weights(
    data: EvaluationData, qrels: Qrels, k: int, rows: IntArray
) -> tuple[tuple[str, ...], sparse.csr_matrix]:
    """w_su = 1/(k·|Q_s|) for each graded row u in s's top k of a query q ∈ Q_s (trec_eval's order and queries)."""
    measure = precision_at(k, None)
    runs = data.ranking.runs(top_depth(measure))
    answered = per_query_values(qrels, runs, measure)  # system → the queries trec_eval averages over
    column = {int(e): u for u, e in enumerate(rows.tolist())}
    position = data.grades.pool.positions()
    cells: tuple[list[int], list[int], list[float]] = ([], [], [])
    systems = tuple(answered)
    for s, system in enumerate(systems):
        used = answered[system]
        for query_id in used:
            for passage_id in runs[system].get(query_id, {}):
                u = column.get(position[(query_id, passage_id)])
                if u is not None:  # a ranked passage nobody graded is not relevant, as in trec_eval
                    cells[0].append(s)
                    cells[1].append(u)
                    cells[2].append(1.0 / (k * len(used)))
    weights = sparse.csr_matrix((cells[2], (cells[0], cells[1])), shape=(len(systems), len(rows)))
    return systems, weights


def build_board(session: Session, data: EvaluationData, k: int, min_rating: int) -> Board:
    request = LeaderboardRequest(f"P@{k}", min_rating=min_rating, bootstrap_samples=0)
    rule = LabelRule.parse(request.label, min_rating=min_rating)
    rows, labels = frame_labels(data.grades, rule)
    pool = data.grades.pool
    keys = [(pool.query_ids[int(pool.entry_query[e])], pool.passage_ids[e]) for e in rows.tolist()]
    judgments = queries.load_judgments(session, data.pool)
    manual: Qrels = {q: {p: max(js) for p, js in docs.items()} for q, docs in judgments.items()}
    missing = [key for key in keys if key[1] not in manual.get(key[0], {})]
    assert not missing, f"{len(missing)} graded rows have no TREC judgment, e.g. {missing[:3]}"
    level = 1 if min_rating is None else min_rating
    llm_qrels: Qrels = {}
    for (query_id, passage_id), label in zip(keys, labels.tolist(), strict=True):
        llm_qrels.setdefault(query_id, {})[passage_id] = label
    systems, weights = precision_weights(data, llm_qrels, k, rows)
    # P@k is linear in the rows only if trec_eval averages over the same queries under either labelling
    judged_measure = precision_at(k, RELEVANT_JUDGMENT)
    runs = data.ranking.runs(top_depth(judged_measure))
    human_queries = {s: set(v) for s, v in per_query_values(manual, runs, judged_measure).items()}
    llm_queries = {s: set(v) for s, v in per_query_values(llm_qrels, runs, judged_measure).items()}
    assert human_queries == llm_queries, "trec_eval averages over different queries under the two labellings"
    llm_scores = score_systems(data, request)
    return Board(
        systems=systems,
        weights=weights,
        predicted=(labels >= level).astype(float),
        human=np.array([manual[q][p] >= RELEVANT_JUDGMENT for q, p in keys], dtype=float),
        llm_board={s.system: s.score for s in llm_scores},
        llm_stderr={s.system: s.stderr for s in llm_scores},
        judged_board={s.system: s.score for s in trec_scores(manual, runs, judged_measure)},
    )


def check_plain(board: Board) -> float:
    """The largest |Σ_u w_su·f_u − leaderboard P@k| (and the same for the judgments); asserts it is rounding."""
    plain = board.weights @ board.predicted
    truth = board.weights @ board.human
    worst = 0.0
    for s, system in enumerate(board.systems):
        worst = max(worst, abs(plain[s] - board.llm_board[system]), abs(truth[s] - board.judged_board[system]))
    assert worst <= 1e-12, f"the linear form misses the leaderboard's P@k by {worst}"
    return worst


def tau(scores: Sequence[float], board: Board) -> float:
    values = dict(zip(board.systems, scores, strict=True))
    return rank_correlation(values, scores_to_ranks(board.judged_board)).kendall


def inside(estimates: list[PPIEstimate], board: Board) -> list[bool]:
    """Per system: whether its 95 % interval exists and holds the judgment-based P@k."""
    return [
        e.ci_low is not None and e.ci_high is not None and e.ci_low <= board.judged_board[s] <= e.ci_high
        for s, e in zip(board.systems, estimates, strict=True)
    ]


def held(estimates: list[PPIEstimate], board: Board) -> float:
    """Share of systems whose 95 % interval holds the judgment-based P@k (no interval: a miss)."""
    hits = inside(estimates, board)
    return sum(hits) / len(hits)


def held_where_reported(estimates: list[PPIEstimate], board: Board) -> float:
    """The same among the systems that have an interval (nan where none has)."""
    hits = [h for h, e in zip(inside(estimates, board), estimates, strict=True) if e.stderr is not None]
    return sum(hits) / len(hits) if hits else float("nan")


def rmse(scores: Sequence[float], board: Board) -> float:
    """Root mean squared distance to the judged P@k, over systems."""
    judged = np.array([board.judged_board[s] for s in board.systems])
    return float(np.sqrt(np.mean((np.asarray(scores) - judged) ** 2)))


def naive_held(board: Board) -> int:
    """How many LLM-only values ± 1.96 · (their stderr over queries) hold the judged P@k."""
    return sum(abs(board.llm_board[s] - board.judged_board[s]) <= 1.96 * board.llm_stderr[s] for s in board.systems)


def mean_sd(values: list[float]) -> str:
    kept = [v for v in values if v == v]  # a seed where no system has an interval has no rate
    if len(kept) < 2:
        return "n/a"
    return f"{statistics.fmean(kept):.3f} ± {statistics.stdev(kept):.3f}"


COLUMNS = (
    "n rows",
    "τ PPI++",
    "τ PPI (λ = 1)",
    "τ human-only (λ = 0)",
    "CI holds judged: PPI++",
    "PPI (λ = 1)",
    "human-only",
    "holds where reported, PPI++",
    "RMSE PPI++",
    "RMSE human-only",
    "no interval, PPI++",
    f"support ≥ {MIN_SUPPORT}, PPI++",
    "λ̂",
)


def simulate(board: Board, n: int, seeds: int) -> list[str]:
    """One table row: mean ± sd over seeds of τ and of the share of intervals holding the judged P@k."""
    names = ("tau", "tau1", "tau0", "held", "held1", "held0", "reported", "rmse", "rmse0", "none", "reliable", "λ")
    columns: dict[str, list[float]] = {name: [] for name in names}
    for seed in range(seeds):
        rows = np.random.default_rng(seed).choice(board.human.size, size=n, replace=False)
        sample = (board.weights, board.predicted, rows, board.human[rows])
        tuned, plain_ppi, classical = (
            [within(e) for e in estimates]  # as the leaderboard shows them
            for estimates in (
                ppi_linear(*sample),
                ppi_linear(*sample, power_tuning=False),
                classical_linear(*sample),
            )
        )
        for suffix, estimates in (("", tuned), ("1", plain_ppi), ("0", classical)):
            columns["tau" + suffix].append(tau([e.estimate for e in estimates], board))
            columns["held" + suffix].append(held(estimates, board))
        columns["reported"].append(held_where_reported(tuned, board))
        columns["rmse"].append(rmse([e.estimate for e in tuned], board))
        columns["rmse0"].append(rmse([e.estimate for e in classical], board))
        columns["none"].append(statistics.fmean(e.stderr is None for e in tuned))
        columns["reliable"].append(statistics.fmean(e.stderr is not None and e.support >= MIN_SUPPORT for e in tuned))
        columns["λ"].append(tuned[0].tuning)
    return [str(n), *(mean_sd(values) for values in columns.values())]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-rating", type=int, default=4, help="τ: relevant iff max rating ≥ τ")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"needs {DATA}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        url = f"sqlite:///{Path(workdir) / 'ppi.sqlite'}"
        import_dev(url)
        with session_scope(make_engine(url)) as session:
            collection = ensure_collection(session, "dl19")
            data = evaluation_data(session, collection, LeaderboardRequest("P@10"))
            boards = {k: build_board(session, data, k, args.min_rating) for k in CUTOFFS}
    machine = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)"
    print(f"dl19-dev, grader {queries.describe_grader(data.grader)}, τ = {args.min_rating}, {args.seeds} seeds")
    print(f"{machine}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    for k, board in boards.items():
        print(f"\n### P@{k}: N = {board.human.size} graded rows, {len(board.systems)} systems\n")
        print(f"- plain P@{k} = the leaderboard's (largest |difference| {check_plain(board):.1e})")
        print(f"- relevance rate: LLM {board.predicted.mean():.3f}, judgments {board.human.mean():.3f}")
        print(f"- agreement of the LLM's and the judgments' relevance: {(board.predicted == board.human).mean():.3f}")
        llm = [board.llm_board[s] for s in board.systems]
        print(f"- LLM-only board: Kendall τ = {tau(llm, board):.3f}, RMSE = {rmse(llm, board):.3f}")
        print(f"- LLM-only ± 1.96·stderr over queries holds the judged P@{k}: {naive_held(board)}/{len(llm)}\n")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for n in SAMPLE_SIZES:
            print("| " + " | ".join(simulate(board, n, args.seeds)) + " |")
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
