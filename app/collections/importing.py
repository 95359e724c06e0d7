"""One import of many files, in the fixed order the CLI and the web form both use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from app.collections import autojudge, service
from app.collections.errors import ImportFormatError
from app.collections.nuggets_io import import_nuggets
from app.collections.readers import read_run
from app.collections.responses import import_responses
from app.db import session_scope
from app.models import Collection
from app.rubrics.service import import_banks


@dataclass
class ImportFiles:
    queries: list[Path] = field(default_factory=list)
    passages: list[Path] = field(default_factory=list)
    bank: list[Path] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)
    qrels: list[Path] = field(default_factory=list)
    official: list[Path] = field(default_factory=list)
    responses: list[Path] = field(default_factory=list)
    # TREC RAG / AutoJudge (docs/formats.md)
    requests: list[Path] = field(default_factory=list)
    nuggets: list[Path] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)
    # (judge, graded qrels); set after construction, so that every init field is a list of paths
    judgments_from: list[tuple[str, Path]] = field(default_factory=list, init=False)


def import_files(
    session: Session, collection: Collection, files: ImportFiles, progress: service.Progress = service.no_progress
) -> dict[str, int]:
    """Queries, requests, passages, banks, nuggets, runs, reports, qrels, other judges' qrels, the official
    ranking, then responses; rows written per kind.

    The caller owns the transaction: any error leaves it to be rolled back whole. Each run file
    must carry its own run tag (the system's name), or two runs would silently merge into one.
    """
    _check_distinct_run_tags(files.runs)
    reports = [service.import_queries(session, collection, p) for p in files.queries]
    reports += [autojudge.import_requests(session, collection, p) for p in files.requests]
    reports += [service.import_interchange(session, collection, p, progress) for p in files.passages]
    if files.bank:
        reports.append(import_banks(session, collection, files.bank))
    if files.nuggets:
        reports.append(import_nuggets(session, collection, files.nuggets))
    reports += [service.import_run(session, collection, p, progress) for p in files.runs]
    reports += [autojudge.import_reports(session, collection, p) for p in files.reports]  # systems, like runs
    reports += [service.import_qrels(session, collection, p) for p in files.qrels]
    reports += [autojudge.import_judgments_from(session, collection, j, p) for j, p in files.judgments_from]
    reports += [service.import_official(session, collection, p) for p in files.official]
    reports += [import_responses(session, collection, p) for p in files.responses]
    totals = service.ImportReport()
    for report in reports:
        for kind, n in report.counts.items():
            totals.add(kind, n)
    return totals.counts


def import_into(collection_name: str, files: ImportFiles) -> dict[str, int]:
    """``import_files`` in a transaction of its own, for a worker thread: all of it commits, or none."""
    with session_scope() as session:
        return import_files(session, service.ensure_collection(session, collection_name), files)


def _check_distinct_run_tags(runs: list[Path]) -> None:
    """Refuse a second run file with a tag already used in this import, naming both files."""
    first_with: dict[str, Path] = {}
    for path in runs:
        first = next(read_run(path), None)  # the dropped generator closes its file at once
        if first is None:
            continue  # an empty run is refused when it is imported, with its own message
        if first.tag in first_with:
            raise ImportFormatError(
                str(path),
                first.line,
                "tag",
                f"run tag {first.tag!r} is also the tag of {first_with[first.tag]}; each run names its "
                "own system, so two runs with one tag would merge (give each run its own tag)",
            )
        first_with[first.tag] = path
