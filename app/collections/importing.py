"""One import of many files, in the fixed order the CLI and the web form both use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from app.collections import service
from app.collections.responses import import_responses
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


def import_files(
    session: Session, collection: Collection, files: ImportFiles, progress: service.Progress = service.no_progress
) -> dict[str, int]:
    """Queries, passages, banks, runs, qrels, the official ranking, then responses; rows written per kind.

    The caller owns the transaction: any error leaves it to be rolled back whole.
    """
    reports = [service.import_queries(session, collection, p) for p in files.queries]
    reports += [service.import_interchange(session, collection, p, progress) for p in files.passages]
    if files.bank:
        reports.append(import_banks(session, collection, files.bank))
    reports += [service.import_run(session, collection, p, progress) for p in files.runs]
    reports += [service.import_qrels(session, collection, p) for p in files.qrels]
    reports += [service.import_official(session, collection, p) for p in files.official]
    reports += [import_responses(session, collection, p) for p in files.responses]
    totals = service.ImportReport()
    for report in reports:
        for kind, n in report.counts.items():
            totals.add(kind, n)
    return totals.counts
