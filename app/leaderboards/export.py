"""Leaderboards in the files TREC AutoJudge's ``autojudge-evaluate`` reads (tested with autojudge-evaluate 1.1.0).

Its loader (autojudge_evaluate.eval_results.io / autojudge_base.leaderboard) takes one row per
(run, topic, measure) in one of these layouts, whitespace-separated:

* ``trec_eval``   — ``measure  topic  value``, one file per run, the file's name is the run id
  (so ``--out`` is a directory);
* ``ir_measures`` — ``run  topic  measure  value``, one file;
* ``jsonl``       — one ``{"run_id", "topic_id", "measure", "value"}`` object per line, one file.

Each run gets its per-query values and an ``all`` row, the run's score: the mean over the queries
it has a value for, which is both our leaderboard's score and what autojudge-evaluate recomputes
(``--recompute-aggregates``). Values are written at full precision (Python's shortest repr), so
the correlations autojudge-evaluate computes are those of the exact scores our ``leaderboard``
command correlates. The ``_overall_`` row (Cover's all-passages reference) is not a run and is
left out. Whitespace in an id would shift the columns of the two tab-separated layouts, and a run
id that is no plain file name cannot name a trec_eval file: both are refused, not mangled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.errors import Invalid
from app.evaluation.cover import OVERALL
from app.evaluation.types import SystemScore

ALL_TOPICS = "all"  # autojudge-evaluate's aggregate topic id
ExportFormat = Literal["trec_eval", "ir_measures", "jsonl"]
FORMATS: tuple[ExportFormat, ...] = ("trec_eval", "ir_measures", "jsonl")
_WHITESPACE = re.compile(r"\s")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_+\-][A-Za-z0-9_.+\-@=,()]{0,199}$")


@dataclass(frozen=True, slots=True)
class EvalRow:
    """One value of one run on one topic (``all`` for the run's score)."""

    run_id: str
    topic_id: str
    measure: str
    value: float


def parse_format(text: str) -> ExportFormat:
    for name in FORMATS:
        if text == name:
            return name
    raise Invalid(f"format must be one of {', '.join(FORMATS)}, got {text[:40]!r}")


def eval_rows(scores: Iterable[SystemScore], measure: str) -> list[EvalRow]:
    """Per run (by name): its per-query values in query order, then its ``all`` row."""
    rows: list[EvalRow] = []
    for score in sorted((s for s in scores if s.system != OVERALL), key=lambda s: s.system):
        rows += [EvalRow(score.system, q, measure, float(v)) for q, v in sorted(score.per_query.items())]
        rows.append(EvalRow(score.system, ALL_TOPICS, measure, float(score.score)))
    return rows


def write_leaderboard(rows: Sequence[EvalRow], fmt: ExportFormat, out: Path) -> list[Path]:
    """Write ``rows`` in ``fmt`` at ``out`` (a directory for trec_eval); the files written.

    A path that cannot be written (a directory given for a file, a file for the trec_eval
    directory, no permission) is the user's mistake: ``Invalid`` naming it, not a traceback.
    """
    try:
        return _write(rows, fmt, out)
    except OSError as error:
        raise Invalid(f"cannot write {str(out)[:200]!r}: {error.strerror or error}") from error


def _write(rows: Sequence[EvalRow], fmt: ExportFormat, out: Path) -> list[Path]:
    if fmt == "jsonl":
        text = "".join(
            json.dumps({"run_id": r.run_id, "topic_id": r.topic_id, "measure": r.measure, "value": r.value}) + "\n"
            for r in rows
        )
        out.write_text(text, encoding="utf-8")
        return [out]
    _check_columns(rows)
    if fmt == "ir_measures":
        out.write_text("".join(f"{r.run_id}\t{r.topic_id}\t{r.measure}\t{r.value!r}\n" for r in rows), encoding="utf-8")
        return [out]
    by_run: dict[str, list[EvalRow]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row)
    for run_id in by_run:  # every name checked before the first file is written: no half-written directory
        if not _FILE_NAME.match(run_id):
            raise Invalid(f"run {run_id[:60]!r} cannot name a trec_eval file: use --format ir_measures or jsonl")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for run_id, run_rows in by_run.items():
        path = out / run_id
        path.write_text("".join(f"{r.measure}\t{r.topic_id}\t{r.value!r}\n" for r in run_rows), encoding="utf-8")
        paths.append(path)
    return paths


def _check_columns(rows: Sequence[EvalRow]) -> None:
    for row in rows:
        for kind, value in (("run", row.run_id), ("query", row.topic_id), ("measure", row.measure)):
            if not value or _WHITESPACE.search(value):
                raise Invalid(
                    f"{kind} id {value[:60]!r} has whitespace, which the column formats cannot hold: use jsonl"
                )
