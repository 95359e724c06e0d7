"""Benchmark: full leaderboard recompute from the database vs the upstream-style file round trip.

Builds a DL-sized synthetic collection (54 queries, 59 systems, top-100 rankings, 10 questions
per query, every pooled passage graded), imports it (not timed), then times in the same run:

* ours: ``compute_leaderboard`` (load from the DB, derive qrels, P@20 via ir_measures/pytrec_eval,
  mean ± stderr, bootstrap CIs, rank correlation);
* baseline: what the upstream does: write a qrels file and one run file per system, then evaluate
  each run file trec_eval-style (parse qrels + run from disk, evaluate) and correlate.

Run: ``.venv/bin/python bench/evaluate.py`` (writes its figures to docs/benchmarks.md).
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import ir_measures
import pytrec_eval

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.collections.service import ensure_collection, import_interchange, import_official  # noqa: E402
from app.db import make_engine, session_scope  # noqa: E402
from app.evaluation.correlation import rank_correlation  # noqa: E402
from app.leaderboards.service import LeaderboardRequest, compute_leaderboard, load_evaluation_data, qrels_for  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from bench.report import write_section  # noqa: E402

TITLE = "Leaderboard recompute (`bench/evaluate.py`)"

N_QUERIES, N_SYSTEMS, DEPTH, N_ITEMS, POOL_PER_QUERY = 54, 59, 100, 10, 400
REPEATS = 5


def synthetic_collection(directory: Path) -> tuple[Path, Path]:
    rng = random.Random(7)
    systems = [f"sys{s:02d}" for s in range(N_SYSTEMS)]
    quality = {s: rng.random() for s in systems}
    lines = []
    for q in range(N_QUERIES):
        query_id = f"q{q}"
        docs = [f"d{q}_{d}" for d in range(POOL_PER_QUERY)]
        relevance = {d: rng.random() for d in docs}
        rankings: dict[str, list[dict[str, object]]] = {d: [] for d in docs}
        for system in systems:
            noisy = sorted(docs, key=lambda d: -(quality[system] * relevance[d] + rng.random()))[:DEPTH]
            for rank, doc in enumerate(noisy, start=1):
                rankings[doc].append(
                    {
                        "method": system,
                        "paragraphId": doc,
                        "queryId": query_id,
                        "rank": rank,
                        "score": float(DEPTH - rank),
                    }
                )
        paragraphs = []
        for doc in docs:
            if not rankings[doc]:
                continue
            items = [f"{query_id}/item{i}" for i in range(N_ITEMS)]
            ratings = [min(5, max(0, int(relevance[doc] * 6 - rng.random() * 2))) for _ in items]
            paragraphs.append(
                {
                    "paragraph_id": doc,
                    "text": f"synthetic passage {doc}",
                    "paragraph_data": {"judgments": [], "rankings": rankings[doc]},
                    "exam_grades": [
                        {
                            "correctAnswered": [i for i, r in zip(items, ratings, strict=True) if r > 0],
                            "wrongAnswered": [i for i, r in zip(items, ratings, strict=True) if r == 0],
                            "answers": [[i, str(r)] for i, r in zip(items, ratings, strict=True)],
                            "llm": "synthetic",
                            "llm_options": {},
                            "exam_ratio": 0.0,
                            "prompt_info": {"prompt_class": "QuestionSelfRatedUnanswerablePromptWithChoices"},
                            "self_ratings": [
                                {"question_id": i, "self_rating": r} for i, r in zip(items, ratings, strict=True)
                            ],
                        }
                    ],
                }
            )
        lines.append(json.dumps([query_id, paragraphs]))
    data = directory / "synthetic.jsonl"
    data.write_text("\n".join(lines) + "\n")
    official = directory / "official.json"
    ranked = sorted(systems, key=lambda s: -quality[s])
    official.write_text(json.dumps({s: i + 1 for i, s in enumerate(ranked)}))
    return data, official


def baseline(url: str, workdir: Path, official: dict[str, float]) -> None:
    """Upstream style: qrels + run files on disk, one trec_eval-style evaluation per run file."""
    engine = make_engine(url)
    with session_scope(engine) as session:
        from app.collections.service import get_collection

        collection = get_collection(session, "bench")
        request = LeaderboardRequest(measure="P@20", min_rating=3)
        data = load_evaluation_data(session, collection, model=None, prompt_class=None)
        qrels = qrels_for(data, request)
    engine.dispose()
    qrels_path = workdir / "exam.qrels"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    run_dir = workdir / "runs"
    run_dir.mkdir(exist_ok=True)
    for system, by_query in data.rankings.items():
        (run_dir / f"{system}.run").write_text(
            "".join(
                f"{q} Q0 {d} {r.rank} {r.score} {system}\n" for q, docs in by_query.items() for d, r in docs.items()
            )
        )
    scores = {}
    for run_file in sorted(run_dir.glob("*.run")):
        file_qrels = ir_measures.read_trec_qrels(str(qrels_path))
        qrels_dict: dict[str, dict[str, int]] = {}
        for qrel in file_qrels:
            qrels_dict.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
        run: dict[str, dict[str, float]] = {}
        for doc in ir_measures.read_trec_run(str(run_file)):
            run.setdefault(doc.query_id, {})[doc.doc_id] = doc.score
        evaluator = pytrec_eval.RelevanceEvaluator(qrels_dict, {"P_20"}, relevance_level=3)
        values = [v["P_20"] for v in evaluator.evaluate(run).values()]
        scores[run_file.stem] = statistics.fmean(values)
    rank_correlation(scores, official)


def timed(fn, repeats: int = REPEATS) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data, official_path = synthetic_collection(workdir)
        url = f"sqlite:///{workdir / 'bench.sqlite'}"
        upgrade(url)
        engine = make_engine(url)
        start = time.perf_counter()
        with session_scope(engine) as session:
            collection = ensure_collection(session, "bench")
            import_interchange(session, collection, data)
            import_official(session, collection, official_path)
        import_seconds = time.perf_counter() - start
        official = json.loads(official_path.read_text())

        def ours(samples: int) -> None:
            with session_scope(engine) as session:
                from app.collections.service import get_collection

                request = LeaderboardRequest(measure="P@20", min_rating=3, bootstrap_samples=samples)
                compute_leaderboard(session, get_collection(session, "bench"), request)

        with session_scope(engine) as session:
            from sqlalchemy import func, select

            from app.models import Grade, PoolEntry, RankingEntry

            sizes = {
                m.__tablename__: session.scalar(select(func.count()).select_from(m))
                for m in (PoolEntry, RankingEntry, Grade)
            }
        ours_full = timed(lambda: ours(1000))
        ours_no_ci = timed(lambda: ours(0))
        base = timed(lambda: baseline(url, workdir, official))
        engine.dispose()
    report(sizes, import_seconds, ours_full, ours_no_ci, base)


def report(
    sizes: dict[str, int | None], import_seconds: float, ours_full: float, ours_no_ci: float, base: float
) -> None:
    machine = f"{platform.node()} ({platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()})"
    section = f"""## Leaderboard recompute (`bench/evaluate.py`)

Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine}, SQLite.
Synthetic DL-sized collection: {N_QUERIES} queries, {N_SYSTEMS} systems, top-{DEPTH}, {N_ITEMS} questions per query;
{sizes["pool_entry"]} pooled passages, {sizes["ranking_entry"]} ranking entries, {sizes["grade"]} grades (import, not timed: {import_seconds:.1f} s).
Median of {REPEATS} runs each, P@20 at τ = 3, label = max, with Spearman/Kendall/τ_AP against an official ranking.

| path | median time | ratio to baseline |
|---|---|---|
| baseline: write qrels + 59 run files, evaluate each file trec_eval-style | {base * 1000:.0f} ms | 1.00 |
| ours: recompute from the database, with 1,000-sample bootstrap CIs | {ours_full * 1000:.0f} ms | {base / ours_full:.2f}× faster |
| ours: recompute from the database, CIs off | {ours_no_ci * 1000:.0f} ms | {base / ours_no_ci:.2f}× faster |

Target: recompute under 200 ms on 2 cores. {"Met" if ours_no_ci < 0.2 else "Not met"} (CIs off: {ours_no_ci * 1000:.0f} ms).
"""
    write_section(TITLE, section.split("\n", 2)[2])


if __name__ == "__main__":
    main()
