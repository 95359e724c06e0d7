"""Which offline model should be the default grader? Measured on dl19-dev against the manual judgments.

For each candidate, a passage's score is the max over its query's questions (expected grade where
the method has one, else the rating). Reported: passage-level ROC AUC for "judged relevant"
(TREC DL: relevance ≥ 2), and Cohen's κ of "max rating ≥ τ" against it at the best τ.
The stored FLAN-T5-large grades of the same passages are the reference.

Candidates: all-MiniLM-L6-v2 similarity on every cell; SmolLM2-135M-Instruct in ``score`` and
``generate`` mode on a stratified passage sample (on 2 CPU cores all 21,870 prompts take hours).
Also measured: how often SmolLM2's score-mode arg-max equals the first grade digit it writes in
generate mode, and the reference parse of that text.

Run: ``.venv/bin/python bench/model_quality.py [--sample 24]``; writes docs/models.md.
"""

from __future__ import annotations

import argparse
import platform
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from scipy.stats import mannwhitneyu
from sqlalchemy import select

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.collections.service import ensure_collection, import_interchange, import_queries  # noqa: E402
from app.db import make_engine, session_scope  # noqa: E402
from app.evaluation.agreement import Confusion  # noqa: E402
from app.grading.engine import CellScope, grade_cells  # noqa: E402
from app.grading.service import GraderSpec, build_method, plan_for  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.models import Grade, Grader, Judgment  # noqa: E402
from app.rubrics.service import import_banks  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "dl19-dev"
RELEVANT = 2


def auc(positives: list[float], negatives: list[float]) -> float:
    """ROC AUC = U / (n₊ · n₋), Mann-Whitney U with ties counted half."""
    if not positives or not negatives:
        return float("nan")
    result = mannwhitneyu(positives, negatives, alternative="greater")
    return float(result.statistic) / (len(positives) * len(negatives))


def best_kappa(scores: dict[int, tuple[float, int]], relevant: dict[int, bool]) -> tuple[float, int]:
    best = (-1.0, 0)
    for tau in range(1, 6):
        tp = sum(1 for e, (_, r) in scores.items() if r >= tau and relevant[e])
        fp = sum(1 for e, (_, r) in scores.items() if r >= tau and not relevant[e])
        fn = sum(1 for e, (_, r) in scores.items() if r < tau and relevant[e])
        tn = len(scores) - tp - fp - fn
        best = max(best, (Confusion(tp, fp, fn, tn).kappa(), tau))
    return best


def passage_scores(session: object, grader_pk: int, entries: Iterable[int] | None) -> dict[int, tuple[float, int]]:
    """pool entry → (max expected-or-rating, max rating) over the entry's items."""
    query = select(Grade.pool_entry_pk, Grade.expected_grade, Grade.self_rating).where(Grade.grader_pk == grader_pk)
    wanted = set(entries) if entries is not None else None
    out: dict[int, tuple[float, int]] = {}
    for entry, expected, rating in session.execute(query).all():  # type: ignore[attr-defined]
        if wanted is not None and entry not in wanted or rating is None:
            continue
        value = expected if expected is not None else float(rating)
        old = out.get(entry, (-1.0, -1))
        out[entry] = (max(old[0], value), max(old[1], rating))
    return out


def report_row(name: str, scores: dict[int, tuple[float, int]], relevant: dict[int, bool]) -> str:
    positives = [s for e, (s, _) in scores.items() if relevant[e]]
    negatives = [s for e, (s, _) in scores.items() if not relevant[e]]
    kappa, tau = best_kappa(scores, relevant)
    return f"| {name} | {len(scores)} | {auc(positives, negatives):.3f} | {kappa:.3f} (τ={tau}) |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", type=int, default=24, help="passages per judged class for the SmolLM2 runs")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"needs {DATA}")
    workdir = Path(tempfile.mkdtemp())
    url = f"sqlite:///{workdir / 'quality.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        collection = ensure_collection(session, "dl19-dev")
        import_queries(session, collection, DATA / "queries.json")
        import_interchange(session, collection, DATA / "passages-graded.jsonl.gz")
        import_banks(session, collection, [DATA / "questions.jsonl.gz"])

    timings: dict[str, float] = {}
    rows: list[str] = []
    with session_scope(engine) as session:
        judged = dict(session.execute(select(Judgment.pool_entry_pk, Judgment.relevance)).all())
        relevant = {entry: rel >= RELEVANT for entry, rel in judged.items()}
        rng = random.Random(13)
        sample = rng.sample(sorted(e for e, r in relevant.items() if r), args.sample) + rng.sample(
            sorted(e for e, r in relevant.items() if not r), args.sample
        )
        flan = session.scalar(select(Grader.id).where(Grader.prompt_class.like("QuestionSelfRated%")))
        assert flan is not None
        rows.append(
            report_row(
                "FLAN-T5-large (stored reference grades), all passages", passage_scores(session, flan, None), relevant
            )
        )
        rows.append(
            report_row("FLAN-T5-large (stored), SmolLM2 sample", passage_scores(session, flan, sample), relevant)
        )
        collection = ensure_collection(session, "dl19-dev")
        specs = {
            "all-MiniLM-L6-v2 similarity": (GraderSpec(backend="similarity"), None),
            "SmolLM2-135M-Instruct score": (GraderSpec(backend="hf", mode="score"), sample),
            "SmolLM2-135M-Instruct generate": (GraderSpec(backend="hf", mode="generate"), sample),
        }
        graders: dict[str, int] = {}
        for name, (spec, entries) in specs.items():
            scope = CellScope(pool_entry_pks=frozenset(entries) if entries else None)
            method = build_method(spec)
            cells = plan_for(session, collection, spec, None, scope)
            start = time.perf_counter()
            grade_cells(session, method, cells, after_batch=lambda _r: session.commit())
            timings[name] = time.perf_counter() - start
            config = method.config()
            graders[name] = (
                session.scalar(
                    select(Grader.id).where(Grader.model == config.model, Grader.prompt_class == config.prompt_class)
                )
                or 0
            )
            scope_label = "all passages" if entries is None else "SmolLM2 sample"
            rows.append(
                report_row(
                    f"{name}, {scope_label} ({len(cells)} prompts, {timings[name]:.0f} s)",
                    passage_scores(session, graders[name], entries),
                    relevant,
                )
            )
        agreement = argmax_agreement(
            session, graders["SmolLM2-135M-Instruct score"], graders["SmolLM2-135M-Instruct generate"]
        )
    write_report(rows, agreement, args.sample)


def argmax_agreement(session: object, score_pk: int, generate_pk: int) -> tuple[int, int, int]:
    """(cells, arg-max == first digit written, arg-max == reference parse of the text)."""

    def by_cell(pk: int) -> dict[tuple[int, str], tuple[str | None, int | None]]:
        query = select(Grade.pool_entry_pk, Grade.item_id, Grade.raw_answer, Grade.self_rating).where(
            Grade.grader_pk == pk
        )
        return {(e, i): (raw, rating) for e, i, raw, rating in session.execute(query).all()}  # type: ignore[attr-defined]

    scored, generated = by_cell(score_pk), by_cell(generate_pk)
    first_digit = same_parse = 0
    for cell, (_, argmax) in scored.items():
        text, parsed = generated.get(cell, (None, None))
        digit = re.search(r"[0-5]", text or "")
        first_digit += int(digit is not None and int(digit.group()) == argmax)
        same_parse += int(parsed == argmax)
    return len(scored), first_digit, same_parse


def write_report(rows: list[str], agreement: tuple[int, int, int], sample: int) -> None:
    cells, first_digit, same_parse = agreement
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# Offline grader quality on dl19-dev

Measured {stamp} on `{platform.node()}` ({platform.processor() or platform.machine()}, CPU only) by
`bench/model_quality.py`. Relevant = manual judgment ≥ {RELEVANT}. Passage score = max over the query's
questions. The SmolLM2 runs use a stratified sample of {sample} relevant + {sample} non-relevant passages
(with all their questions); the FLAN-T5-large row on the same sample is its reference.

| grader | passages | AUC | best κ |
|---|---|---|---|
{chr(10).join(rows)}

SmolLM2 `score` vs `generate` on the same {cells} cells: the arg-max grade equals the first grade digit
SmolLM2 writes in {first_digit} cells ({first_digit / max(cells, 1):.0%}), and equals the reference
parse of its text in {same_parse} ({same_parse / max(cells, 1):.0%}). The reference parser rates
SmolLM2's usual `- 1: The answer …` as 0 (free text is a "real answer"), which is why the two differ.
"""
    (REPO / "docs" / "models.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
