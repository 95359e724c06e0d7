"""The ``rubric`` command line.

No ``from __future__ import annotations`` here: typer reads every command's annotations at start, and
string annotations would be compiled again by ``eval`` on each run (issue 16: start under 0.5 s).
"""

import functools
import json
import shlex
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from app import collector
from app.errors import DomainError
from app.evaluation.formatting import render_tables
from app.leaderboards import measures

# Start-up stays under 0.5 s (issue 16): this module imports only typer and light modules; SQLAlchemy,
# Rich's console and every service load inside the commands that use them (tests/test_cli_start.py).
if TYPE_CHECKING:
    from rich.console import Console

    from app.evaluation.formatting import TableFormat
    from app.leaderboards.service import LeaderboardRequest

app = typer.Typer(
    help="Rubric Workbench: evaluate search and RAG systems with LLM-graded rubrics.", no_args_is_help=True
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
export_app = typer.Typer(help="Export collections, qrels and runs.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(export_app, name="export")


class _StderrConsole:
    """The CLI's Rich console on stderr, built on its first use: importing Rich's console costs every
    command start, and most commands print one line at the end."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def console(self) -> "Console":
        """The console itself (for Rich's progress bars, which draw on it)."""
        if self._console is None:
            from rich.console import Console

            # Messages hold user data (names, query ids, file lines): never read them as Rich markup or emoji codes.
            self._console = Console(stderr=True, markup=False, emoji=False, highlight=False)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console(), name)


err: Any = _StderrConsole()

CollectionArg = Annotated[str, typer.Argument(help="Collection name.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Grader model (GradeFilter llm).")]
PromptClassOpt = Annotated[str | None, typer.Option("--prompt-class", help="Grader prompt class.")]
GraderOpt = Annotated[
    int | None,
    typer.Option("--grader", min=1, max=2**63 - 1, help="Grader by id (default: the collection's primary grader)."),
]
FormatOpt = Annotated[str, typer.Option("--format", help="tsv, json, md or latex.")]
MEASURE_HELP = measures.HELP
# The leaderboard settings' options, shared by every command that computes a board (leaderboard, compare,
# export leaderboard, export bundle), so their bounds and help cannot drift apart.
MinRatingOpt = Annotated[
    int | None,
    typer.Option("--min-rating", min=0, max=1000, help="Relevance threshold τ (trec_eval -l; Cover threshold)."),
]
TopKOpt = Annotated[
    int, typer.Option("--top-k", min=1, max=10_000, help="Cover's and the nugget scores' rank cut-off (inclusive).")
]
LabelOpt = Annotated[str, typer.Option("--label", help="Qrels label: max, min-answers:M or count.")]
RubricVersionOpt = Annotated[
    int | None, typer.Option("--rubric-version", min=1, max=2**31 - 1, help="Only count items of this version.")
]
ExcludeFlaggedOpt = Annotated[
    bool, typer.Option("--exclude-flagged", help="Leave out the items judges flagged as spurious.")
]
# an imported judge's level: its grades from L count as relevant (UMBRELA's 0-3: 2); bounds of app/agreement/external.py
MinExternalOpt = Annotated[
    int, typer.Option("--min-external", min=1, max=1000, help="The judge's relevant grades start here (UMBRELA: 2).")
]


def _fail(message: str) -> None:
    """Print ``error: <message>`` (the message verbatim, only the prefix styled) and exit 2."""
    from rich.text import Text

    err.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    raise typer.Exit(2)


UNMIGRATED = "the database lacks the workbench's tables (new, or at an older schema): run `rubric db upgrade`"


@contextmanager
def _user_errors() -> Iterator[None]:
    """The CLI's one mapping of errors: a domain error (app/errors.py) or a busy database exits 2 with
    ``error: …``; anything else is a bug and keeps its traceback."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from app.db import is_busy, is_unmigrated

    try:
        yield
    except DomainError as exc:
        _fail(str(exc))
    except (OperationalError, ProgrammingError) as exc:
        if is_unmigrated(exc):
            _fail(UNMIGRATED)
        if not isinstance(exc, OperationalError) or not is_busy(exc):
            raise
        _fail("the database is busy: locked by another process (a running job or import); try again in a moment")


@contextmanager
def _progress(description: str) -> Iterator[Callable[[int], None]]:
    if not sys.stderr.isatty():
        yield lambda _n: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} done"),
        TimeElapsedColumn(),
        console=err.console(),
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=None)
        yield lambda n: progress.advance(task, n)


def _format(fmt: str) -> "TableFormat":
    if fmt not in ("tsv", "json", "md", "latex"):
        _fail(f"unknown format {fmt!r}: use tsv, json, md or latex")
    return fmt  # type: ignore[return-value]


def _session() -> Any:
    from app.db import session_scope

    return session_scope()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the database schema to the newest revision."""
    from app.config import get_settings
    from app.migrate import upgrade

    with _user_errors():
        upgrade(get_settings().database_url)
    # one short fixed line, which Rich would print the same: loading its console costs 0.05 s of the start
    typer.echo("database is up to date", err=True)


@db_app.command("clear-snapshots")
def db_clear_snapshots() -> None:
    """Delete every persisted evaluation snapshot (docs/snapshots.md): run it after restoring a
    database from a backup in place, which the snapshot files cannot tell from the database they came from."""
    from app.collections.snapshot import clear_files

    with _user_errors():
        removed = clear_files()
    err.print(f"removed {removed} snapshot file{'' if removed == 1 else 's'}")


def _run_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        else:
            files.append(path)
    return files


@app.command("import")
def import_command(
    collection: CollectionArg,
    bundle: Annotated[
        Path | None,
        typer.Argument(help="With COLLECTION `bundle`: a reproducibility bundle to import (docs/bundles.md)."),
    ] = None,
    passages: Annotated[
        list[Path] | None, typer.Option("--passages", help="Interchange file(s) (.jsonl[.gz]).")
    ] = None,
    queries: Annotated[Path | None, typer.Option("--queries", help="Queries: JSON {qid: text} or TSV.")] = None,
    bank: Annotated[list[Path] | None, typer.Option("--bank", help="Test bank file(s); repeatable.")] = None,
    runs: Annotated[list[Path] | None, typer.Option("--runs", help="TREC run file or directory; repeatable.")] = None,
    qrels: Annotated[Path | None, typer.Option("--qrels", help="TREC qrels file.")] = None,
    official: Annotated[
        Path | None, typer.Option("--official", help="Official leaderboard JSON {system: rank}.")
    ] = None,
    responses: Annotated[
        list[Path] | None,
        typer.Option("--responses", help="Generated responses: RAG24 answer JSONL or DIR/<system>/<qid>.txt."),
    ] = None,
    requests: Annotated[
        list[Path] | None, typer.Option("--requests", help="AutoJudge Request topics (JSONL); repeatable.")
    ] = None,
    nuggets: Annotated[
        list[Path] | None,
        typer.Option("--nuggets", help="NuggetBanks v3 or AutoNuggetizer nugget list (detected); repeatable."),
    ] = None,
    reports: Annotated[
        list[Path] | None,
        typer.Option("--reports", help="AutoJudge Report RAG outputs with citations: JSONL file or directory."),
    ] = None,
    judgments_from: Annotated[
        list[str] | None,
        typer.Option("--judgments-from", help="NAME=FILE: graded qrels of another judge (e.g. umbrela=qrels.txt)."),
    ] = None,
) -> None:
    """Import files into a collection, all in one transaction: any error leaves the database unchanged.

    Formats and the package versions they are tested against: docs/formats.md.
    """
    from app.collections import service
    from app.collections.importing import ImportFiles, import_files

    files = ImportFiles(
        queries=[queries] if queries else [],
        passages=list(passages or []),
        bank=list(bank or []),
        runs=_run_files(runs or []),
        qrels=[qrels] if qrels else [],
        official=[official] if official else [],
        responses=list(responses or []),
        requests=list(requests or []),
        nuggets=list(nuggets or []),
        reports=list(reports or []),
    )
    files.judgments_from = [_judge_file(spec) for spec in judgments_from or []]
    if bundle is not None:
        _import_bundle(collection, bundle, files)
        return
    with _user_errors(), _session() as session, _progress("importing") as progress:
        totals = import_files(session, service.ensure_collection(session, collection), files, progress)
    summary = ", ".join(f"{n} {kind}" for kind, n in totals.items()) or "nothing new"
    err.print(f"imported into {collection!r}: {summary}")


def _import_bundle(word: str, path: Path, files: Any) -> None:
    """``rubric import bundle PATH``: a bundle into an empty database, its ids kept (app/collections/bundle.py)."""
    from dataclasses import astuple

    from app.collections.bundle import import_bundle

    if word != "bundle":
        _fail(f"a second argument is only taken as `rubric import bundle PATH`, not after {word!r}")
    if any(astuple(files)):
        _fail("`rubric import bundle PATH` takes no other files: the bundle holds the whole collection")
    with _user_errors(), _session() as session:
        imported = import_bundle(session, path)
    rows = sum(imported.rows.values())
    err.print(f"imported collection {imported.collection!r} from {path}: {rows} rows; reproduce its leaderboard with")
    typer.echo(shlex.join(imported.argv))


@app.command("leaderboard")
def leaderboard_command(
    collection: CollectionArg,
    measure: Annotated[str, typer.Option("--measure", help=MEASURE_HELP)],
    min_rating: MinRatingOpt = None,
    top_k: TopKOpt = 20,
    label: LabelOpt = "max",
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    rubric_version: RubricVersionOpt = None,
    official: Annotated[
        Path | None, typer.Option("--official", help="Official leaderboard JSON (default: imported one).")
    ] = None,
    fmt: FormatOpt = "tsv",
    reference_rounding: Annotated[
        bool, typer.Option("--reference-rounding", help="trec_eval's 4 decimals, then 3.")
    ] = False,
    bootstrap: Annotated[
        int | None, typer.Option("--bootstrap", min=0, max=100_000, help="Bootstrap resamples for the CIs (0: none).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, max=2**32 - 1, help="Bootstrap seed.")] = None,
    per_query_correlation: Annotated[
        bool, typer.Option("--per-query-correlation", help="Correlate per query against the manual judgments.")
    ] = False,
    min_judgment: Annotated[
        int,
        typer.Option(
            "--min-judgment",
            min=1,
            max=4,
            help="Manual judgments' relevance level for --per-query-correlation (TREC DL: 2).",
        ),
    ] = 2,
    exclude_flagged: ExcludeFlaggedOpt = False,
    significance: Annotated[
        bool,
        typer.Option(
            "--significance",
            help="Test each system against the next one down, and every pair with Holm (paired randomisation, t-test).",
        ),
    ] = False,
    trials: Annotated[
        int, typer.Option("--trials", min=100, max=100_000, help="Sign flips of the randomisation test.")
    ] = 10_000,
    overrides: Annotated[
        bool, typer.Option("--overrides", help="Judges' grade overrides replace the grader's ratings.")
    ] = False,
    ppi: Annotated[
        bool,
        typer.Option(
            "--ppi",
            help="Prediction-powered Cover and P@k with 95 % intervals (clipped to [0, 1]; none where the labelled "
            "rows in a system's top k show no disagreement) from the judges' uniform sample (docs/ppi.md).",
        ),
    ] = False,
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="Score on this imported judge's graded qrels (--judgments-from NAME=FILE) instead, and correlate "
            "with the grader's leaderboard and the official ranks (a trec_eval measure).",
        ),
    ] = None,
    min_external: MinExternalOpt = 2,
) -> None:
    """Score every system and correlate with the official leaderboard (the web's leaderboard page)."""
    from app.collections.readers import read_official
    from app.collections.service import get_collection
    from app.leaderboards import service
    from app.leaderboards.analysis import leaderboard_analysis, leaderboard_analysis_json, significance_tables
    from app.leaderboards.measures import TrecMeasure

    output = _format(fmt)
    checked = _board_request(
        measure,
        min_rating,
        top_k,
        label,
        rubric_version,
        reference_rounding,
        bootstrap,
        seed,
        overrides,
        exclude_flagged,
    )
    if per_query_correlation and not isinstance(checked.measure, TrecMeasure):
        _fail("--per-query-correlation needs a trec_eval measure")
    if judge is not None:
        _judge_leaderboard(collection, judge, checked, (grader, model, prompt_class), min_external, official, output)
        return
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        request = replace(checked, grader_id=_grader_id(session, target, grader, model, prompt_class))
        ranks = {system: rank for _, system, rank in read_official(official)} if official else None
        result = leaderboard_analysis(
            session,
            target,
            request,
            official=ranks,
            per_query_level=min_judgment if per_query_correlation else None,
            significance=significance,
            trials=trials,
            ppi=ppi,
        )
    if output == "json":
        typer.echo(json.dumps(leaderboard_analysis_json(result), indent=1))
    else:
        typer.echo(service.leaderboard_table(result.board).render(output), nl=False)
        if result.significance is not None:  # adjacent pairs, then all pairs with Holm
            for table in significance_tables(result.significance):
                typer.echo("\n" + table.render(output), nl=False)
        if result.ppi is not None:
            from app.leaderboards.ppi import ppi_table

            typer.echo("\n" + ppi_table(result.ppi).render(output), nl=False)


def _board_request(
    measure: str,
    min_rating: int | None,
    top_k: int,
    label: str,
    rubric_version: int | None,
    reference_rounding: bool,
    bootstrap: int | None,
    seed: int | None,
    overrides: bool,
    exclude_flagged: bool,
) -> "LeaderboardRequest":
    """A board's options as a checked request, before any database work (a bad option names itself);
    an unset ``--bootstrap``/``--seed`` takes the environment's default here, once."""
    from app.config import get_settings
    from app.leaderboards import service

    settings = get_settings()
    with _user_errors():
        return service.check_request(
            service.LeaderboardRequest(
                measure=measure,
                min_rating=min_rating,
                top_k=top_k,
                label=label,
                rubric_version=rubric_version,
                reference_rounding=reference_rounding,
                bootstrap_samples=bootstrap if bootstrap is not None else settings.bootstrap_samples,
                bootstrap_seed=seed if seed is not None else settings.bootstrap_seed,
                exclude_flagged=exclude_flagged,
                include_overrides=overrides,
            )
        )


def _judge_leaderboard(
    collection: str,
    judge: str,
    checked: "LeaderboardRequest",
    grader: tuple[int | None, str | None, str | None],
    min_external: int,
    official: Path | None,
    output: "TableFormat",
) -> None:
    """``rubric leaderboard C --measure M --judge NAME``: app/agreement/external.py."""
    from app.agreement import external
    from app.collections.readers import read_official
    from app.collections.service import get_collection

    with _user_errors(), _session() as session:
        external.judge_measure(checked)  # a trec measure, refused before any work
        target = get_collection(session, collection)
        request = replace(checked, grader_id=_grader_id(session, target, *grader))
        ranks = {system: rank for _, system, rank in read_official(official)} if official else None
        result = external.external_comparison(
            session,
            target,
            external.resolve_judge(session, target, judge),
            request,
            min_external=min_external,
            official=ranks,
        )
    if output == "json":
        typer.echo(json.dumps(external.external_comparison_json(result), indent=1))
    else:
        typer.echo(external.external_comparison_table(result).render(output), nl=False)


def _judge_file(spec: str) -> tuple[str, Path]:
    """``NAME=FILE`` of ``--judgments-from`` as (judge, path); the name is checked where it is imported."""
    name, sep, file = spec.partition("=")
    if not sep or not name.strip() or not file:
        _fail(f"--judgments-from expects NAME=FILE (e.g. umbrela=qrels.txt), got {spec[:80]!r}")
    return name.strip(), Path(file)


def _grader_id(session: Any, target: Any, grader: int | None, model: str | None, prompt_class: str | None) -> int:
    """The one grader ``--grader`` or ``--model``/``--prompt-class`` name (else ``error:`` listing the candidates)."""
    from app.collections.graders import resolve_grader

    return resolve_grader(session, target, grader_id=grader, model=model, prompt_class=prompt_class).id


@export_app.command("qrels")
def export_qrels(
    collection: CollectionArg,
    out: Annotated[Path, typer.Option("--out", help="Output qrels file.")],
    label: Annotated[str, typer.Option("--label", help="max, min-answers:M or count.")] = "max",
    min_rating: Annotated[
        int | None, typer.Option("--min-rating", min=0, max=1000, help="τ for --label count.")
    ] = None,
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    rubric_version: RubricVersionOpt = None,
) -> None:
    """Write derived qrels: one line per graded passage, grade-0 passages included."""
    from app.collections.service import get_collection
    from app.evaluation.qrels import format_qrels
    from app.leaderboards import service
    from app.leaderboards.measures import DEFAULT

    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        request = service.check_request(
            service.LeaderboardRequest(
                measure=DEFAULT,  # qrels need no measure: only the label rule and the level
                min_rating=min_rating,
                label=label,
                grader_id=_grader_id(session, target, grader, model, prompt_class),
                rubric_version=rubric_version,
            )
        )
        text = format_qrels(service.qrels_for(service.evaluation_data(session, target, request), request))
    out.write_text(text, encoding="utf-8")
    err.print(f"wrote {text.count(chr(10))} qrels lines to {out}")


@export_app.command("leaderboard")
def export_leaderboard(
    collection: CollectionArg,
    measure: Annotated[str, typer.Option("--measure", help=MEASURE_HELP)],
    out: Annotated[Path, typer.Option("--out", help="Output file (a directory for trec_eval: one file per run).")],
    fmt: Annotated[
        str, typer.Option("--format", help="trec_eval, ir_measures or jsonl: the layouts autojudge-evaluate reads.")
    ] = "ir_measures",
    min_rating: MinRatingOpt = None,
    top_k: TopKOpt = 20,
    label: LabelOpt = "max",
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    rubric_version: RubricVersionOpt = None,
    exclude_flagged: ExcludeFlaggedOpt = False,
) -> None:
    """Write every system's per-query and overall scores for autojudge-evaluate (docs/formats.md)."""
    from app.collections.service import get_collection
    from app.leaderboards import service
    from app.leaderboards.export import eval_rows, parse_format, write_leaderboard

    with _user_errors():
        layout = parse_format(fmt)
        checked = service.check_request(
            service.LeaderboardRequest(
                measure=measure,
                min_rating=min_rating,
                top_k=top_k,
                label=label,
                rubric_version=rubric_version,
                bootstrap_samples=0,
                exclude_flagged=exclude_flagged,
            )
        )
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        request = replace(checked, grader_id=_grader_id(session, target, grader, model, prompt_class))
        scores = service.score_systems(service.evaluation_data(session, target, request), request)
        rows = eval_rows(scores, request.measure.name)
        paths = write_leaderboard(rows, layout, out)
    err.print(f"wrote {len(rows)} {layout} rows ({len(paths)} file(s)) to {out}")


@export_app.command("bundle")
def export_bundle(
    collection: CollectionArg,
    out: Annotated[Path, typer.Option("--out", help="Output .tar.gz (docs/bundles.md).")],
    measure: Annotated[str, typer.Option("--measure", help=MEASURE_HELP)] = "cover",
    min_rating: MinRatingOpt = None,
    top_k: TopKOpt = 20,
    label: LabelOpt = "max",
    grader: GraderOpt = None,
    rubric_version: RubricVersionOpt = None,
    reference_rounding: Annotated[bool, typer.Option("--reference-rounding")] = False,
    bootstrap: Annotated[int | None, typer.Option("--bootstrap", min=0, max=100_000)] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, max=2**32 - 1)] = None,
    per_query_correlation: Annotated[bool, typer.Option("--per-query-correlation")] = False,
    min_judgment: Annotated[int, typer.Option("--min-judgment", min=1, max=4)] = 2,
    exclude_flagged: ExcludeFlaggedOpt = False,
    overrides: Annotated[bool, typer.Option("--overrides", help="Judges' overrides replace the ratings.")] = False,
    significance: Annotated[bool, typer.Option("--significance")] = False,
    trials: Annotated[int, typer.Option("--trials", min=100, max=100_000)] = 10_000,
) -> None:
    """Write a reproducibility bundle: the collection, its grades and the leaderboard of these settings."""
    from app.collections.bundle import board_settings, write_bundle
    from app.collections.graders import resolve_grader
    from app.collections.service import get_collection

    checked = _board_request(
        measure,
        min_rating,
        top_k,
        label,
        rubric_version,
        reference_rounding,
        bootstrap,
        seed,
        overrides,
        exclude_flagged,
    )
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        request = replace(checked, grader_id=resolve_grader(session, target, grader_id=grader).id)
        chosen = board_settings(
            request,
            per_query_level=min_judgment if per_query_correlation else None,
            significance=significance,
            trials=trials,
        )
        summary = write_bundle(session, target, chosen, out)
    err.print(f"wrote {summary.members} members ({summary.size:,} bytes) to {out}")


@export_app.command("nuggets")
def export_nuggets(
    collection: CollectionArg,
    version: Annotated[int, typer.Option("--version", min=1, max=2**31 - 1, help="Rubric version number.")],
    out: Annotated[Path, typer.Option("--out", help="Output NuggetBanks v3 JSONL (.jsonl or .jsonl.gz).")],
) -> None:
    """Write a rubric version as NuggetBanks v3 (TREC AutoJudge), creators from the audit trail."""
    from app.collections.nuggets_io import write_nugget_banks
    from app.collections.service import get_collection

    with _user_errors(), _session() as session:
        count = write_nugget_banks(session, get_collection(session, collection), version, out)
    err.print(f"wrote {count} nugget banks to {out}")


@export_app.command("passages")
def export_passages(
    collection: CollectionArg,
    out: Annotated[Path, typer.Option("--out", help="Output interchange file (.jsonl or .jsonl.gz).")],
) -> None:
    """Write the collection in the upstream interchange format (lossless round trip)."""
    from app.collections.export import write_interchange
    from app.collections.service import get_collection

    with _user_errors(), _session() as session:
        count = write_interchange(session, get_collection(session, collection), out)
    err.print(f"wrote {count} queries to {out}")


@export_app.command("runs")
def export_runs(
    collection: CollectionArg,
    out: Annotated[Path, typer.Option("--out", help="Output directory for {system}.run files.")],
) -> None:
    """Write one TREC run file per system."""
    from app.collections.export import write_runs
    from app.collections.service import get_collection

    with _user_errors(), _session() as session:
        paths = write_runs(session, get_collection(session, collection), out)
    err.print(f"wrote {len(paths)} run files to {out}")


@app.command("agreement")
def agreement_command(
    collection: CollectionArg,
    min_answers: Annotated[
        list[int] | None, typer.Option("--min-answers", min=1, max=1000, help="Repeatable; default 1, 2 and 5.")
    ] = None,
    min_judgment: Annotated[
        int, typer.Option("--min-judgment", min=-2, max=4, help="Lowest relevant judgment (2 for TREC DL).")
    ] = 1,
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep",
            help="Also the threshold sweep, per-item κ and the overrides' agreement (the web's agreement page); "
            "JSON becomes an object with 'tables' and 'calibration'.",
        ),
    ] = False,
    calibration: Annotated[
        bool,
        typer.Option(
            "--calibration",
            help="Only the grader's calibration against the judges' overrides: reliability by predicted grade "
            "and by E[grade] bin, ECE (also part of --sweep).",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="Instead: κ of the grader against this imported judge's graded qrels (--judgments-from NAME=FILE), "
            "and of that judge against the manual judgments.",
        ),
    ] = None,
    min_external: MinExternalOpt = 2,
    min_rating: Annotated[
        int | None,
        typer.Option(
            "--min-rating", min=0, max=1000, help="With --against: the grader's relevant labels (default 4; boolean 1)."
        ),
    ] = None,
    fmt: FormatOpt = "md",
) -> None:
    """Cohen's κ tables (GRADED, MERGE, LENIENT, STRICT) with their confusion counts."""
    if against is not None:
        judge_levels = (min_external, min_rating, min_judgment)
        _external_agreement(collection, against, grader, model, prompt_class, judge_levels, fmt)
        return
    from app.agreement import service
    from app.agreement.analysis import agreement_analysis, agreement_analysis_json, agreement_analysis_tables
    from app.agreement.calibration import calibration_tables, load_calibration
    from app.collections.service import get_collection

    output = _format(fmt)
    levels = min_answers or list(service.MIN_ANSWERS_DEFAULT)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        grader_id = _grader_id(session, target, grader, model, prompt_class)
        calibrated = load_calibration(session, target, grader_id) if sweep or calibration else None
        if sweep:
            result = agreement_analysis(
                session, target, grader_id=grader_id, min_answers=tuple(levels), min_judgment=min_judgment
            )
        elif not calibration:
            tables = service.agreement_tables(
                session, target, min_answers=levels, min_judgment=min_judgment, grader_id=grader_id
            )
    if sweep and calibrated is not None and output == "json":  # the web's agreement.json, key for key
        typer.echo(json.dumps({**agreement_analysis_json(result), "calibration": calibrated.as_json()}, indent=1))
    elif sweep and calibrated is not None:
        both = [*agreement_analysis_tables(result), *calibration_tables(calibrated)]
        typer.echo(render_tables(both, output), nl=False)
    elif calibrated is not None and output == "json":
        typer.echo(json.dumps(calibrated.as_json(), indent=1))
    elif calibrated is not None:
        typer.echo(render_tables(calibration_tables(calibrated), output), nl=False)
    elif output == "json":
        typer.echo(json.dumps(service.agreement_json(tables), indent=1))
    else:
        typer.echo(render_tables([service.as_table(t) for t in tables], output), nl=False)


def _external_agreement(
    collection: str,
    judge: str,
    grader: int | None,
    model: str | None,
    prompt_class: str | None,
    levels: tuple[int, int | None, int],
    fmt: str,
) -> None:
    """``rubric agreement C --against NAME``: app/agreement/external.py; ``levels`` = (judge's, grader's, manual)."""
    from app.agreement import external
    from app.collections.service import get_collection

    output = _format(fmt)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        result = external.external_agreement(
            session,
            target,
            external.resolve_judge(session, target, judge),
            grader_id=_grader_id(session, target, grader, model, prompt_class),
            min_external=levels[0],
            min_rating=levels[1],
            min_judgment=levels[2],
        )
    if output == "json":
        typer.echo(json.dumps(external.external_agreement_json(result), indent=1))
    else:
        typer.echo(render_tables(external.external_agreement_tables(result), output), nl=False)


@app.command("compare")
def compare_command(
    collection: CollectionArg,
    measure: Annotated[str, typer.Option("--measure", help=MEASURE_HELP)] = "cover",
    a_grader: Annotated[
        int | None, typer.Option("--a-grader", min=1, max=2**63 - 1, help="A's grader id (default: --grader).")
    ] = None,
    a_version: Annotated[
        int | None, typer.Option("--a-version", min=1, max=2**31 - 1, help="A's rubric version (default: newest).")
    ] = None,
    b_grader: Annotated[
        int | None, typer.Option("--b-grader", min=1, max=2**63 - 1, help="B's grader id (default: --grader).")
    ] = None,
    b_version: Annotated[
        int | None, typer.Option("--b-version", min=1, max=2**31 - 1, help="B's rubric version (default: newest).")
    ] = None,
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    min_rating: Annotated[
        int | None, typer.Option("--min-rating", min=0, max=1000, help="Relevance threshold τ (default 4).")
    ] = 4,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=10_000, help="Cover's rank cut-off.")] = 20,
    label: LabelOpt = "max",
    fmt: Annotated[str, typer.Option("--format", help="tsv, json or md.")] = "tsv",
) -> None:
    """Two leaderboards side by side (rubric versions or graders): rank changes and Kendall τ (the web's compare)."""
    from app.collections.service import get_collection
    from app.leaderboards.analysis import compare_analysis, compare_json, compare_table

    output = _format(fmt)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        default = None if a_grader and b_grader else _grader_id(session, target, grader, model, prompt_class)
        sides = [
            _side(session, target, grader_id or default, version, measure, min_rating, top_k, label)
            for grader_id, version in ((a_grader, a_version), (b_grader, b_version))
        ]
        result = compare_analysis(*sides)
    if output == "json":
        typer.echo(json.dumps(compare_json(result), indent=1))
    else:
        typer.echo(compare_table(result).render(output), nl=False)


def _side(
    session: Any,
    target: Any,
    grader_id: int | None,
    version: int | None,
    measure: str,
    min_rating: int | None,
    top_k: int,
    label: str,
) -> Any:
    """One side of ``rubric compare``: the leaderboard the web's compare page shows for it (no CIs)."""
    from app.collections.graders import resolve_grader
    from app.leaderboards import service
    from app.leaderboards.analysis import leaderboard_analysis

    chosen = resolve_grader(session, target, grader_id=grader_id)
    request = service.LeaderboardRequest(
        measure=measure,
        min_rating=min_rating,
        top_k=top_k,
        label=label,
        grader_id=chosen.id,
        rubric_version=version if version is not None else service.default_version(session, target, chosen),
        bootstrap_samples=0,
    )
    return leaderboard_analysis(session, target, service.check_request(request))


@app.command("verify")
def verify_command(
    collection: CollectionArg,
    analysis: Annotated[
        str,
        typer.Argument(
            help="grading, bad-questions, uncovered, impact (the web's oversight views verify, bad, uncovered, "
            "impact) or grid."
        ),
    ],
    min_rating: Annotated[int, typer.Option("--min-rating", min=0, max=1000, help="High self-rating threshold R.")] = 4,
    min_judgment: Annotated[
        int, typer.Option("--min-judgment", min=-2, max=4, help="Lowest relevant judgment J (the web's default, 2).")
    ] = 2,
    grader: GraderOpt = None,
    model: ModelOpt = None,
    prompt_class: PromptClassOpt = None,
    answer_prompt_class: Annotated[
        str | None, typer.Option("--answer-prompt-class", help="Grader whose answers to show.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000, help="bad-questions: items per query.")] = 20,
    query: Annotated[str | None, typer.Option("--query", help="Only this query (impact: default the first).")] = None,
    item: Annotated[str | None, typer.Option("--item", help="Only this item.")] = None,
    grade: Annotated[
        int | None, typer.Option("--grade", min=-1, max=5, help="Only this rating (uncovered: best rating); -1 none.")
    ] = None,
    page: Annotated[
        int | None,
        typer.Option(
            "--page", min=1, max=1_000_000, help="One page of 50 rows, as the web shows it (default: all rows)."
        ),
    ] = None,
    fmt: FormatOpt = "tsv",
) -> None:
    """Oversight analyses: verify grading, spurious questions, uncovered passages, question impact, the grid.

    With --page N the output is the web page's data (``--format json``: rows, total, pages, filters,
    grader), equal to /c/COLLECTION/oversight/VIEW?page=N with the same settings.
    """
    from app.collections.graders import resolve_grader
    from app.collections.service import get_collection
    from app.oversight import service

    output = _format(fmt)
    if collection == "bundle" and analysis != "grid" and analysis not in service.VIEWS:
        _verify_bundle(Path(analysis))  # `rubric verify bundle PATH` (a collection "bundle" keeps its analyses)
    if analysis != "grid" and analysis not in service.VIEWS:
        _fail(f"unknown analysis {analysis!r}: use grading, bad-questions, uncovered, impact or grid")
    for name, value in (("--query", query), ("--item", item)):
        if value is not None and len(value) > service.FILTER_CHARS:
            _fail(f"{name} is at most {service.FILTER_CHARS} characters")
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        chosen = resolve_grader(session, target, grader_id=grader, model=model, prompt_class=prompt_class)
        answers = (
            resolve_grader(session, target, model=model, prompt_class=answer_prompt_class)
            if answer_prompt_class
            else None
        )
        if analysis == "grid":
            typer.echo(
                render_tables(service.grid_tables(session, target, chosen, answer_grader=answers), output), nl=False
            )
            return
        shown = service.oversight_page(
            session,
            target,
            service.VIEWS[analysis],
            chosen,
            thresholds=service.Thresholds(min_rating, min_judgment),
            filters=service.RowFilter(query or None, item or None, grade),
            page=page or 1,
            per_page=service.PER_PAGE if page is not None else None,
            answer_grader=answers,
            per_query_limit=limit,
        )
    if page is not None and output == "json":
        typer.echo(json.dumps(shown.as_json(), indent=1, ensure_ascii=False))
    else:
        typer.echo(render_tables([shown.as_table(pager=page is not None)], output), nl=False)


def _verify_bundle(path: Path) -> None:
    """Check a bundle's hashes, import it into a scratch SQLite database and recompute its leaderboard.

    Exit 0 when every member and the board check, 1 on a difference (named), 2 for an unreadable bundle.
    """
    from app.collections.bundle import verify_bundle

    with _user_errors():
        result = verify_bundle(path)
    from rich.text import Text

    for problem in result.problems:
        err.print(Text.assemble(("mismatch:", "bold red"), " ", problem), soft_wrap=True)
    if not result.ok:
        raise typer.Exit(1)
    err.print(f"verified {path}: {result.members} members match their sha256; the leaderboard reproduces byte for byte")
    raise typer.Exit(0)


# Options of every command that runs an LLM (grade, generate); the bounds are the CLI's validation.
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", min=0, max=2**31 - 1, help="openai: sent as `seed` (the preflight checks it is taken)."),
]
MaxNewTokensOpt = Annotated[
    int | None, typer.Option("--max-new-tokens", min=1, max=131_072, help="Output tokens per answer (generate mode).")
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=1.0, max=3600.0, help="openai: seconds per request before it is retried.")
]
MaxRetriesOpt = Annotated[
    int, typer.Option("--max-retries", min=0, max=20, help="openai: retries of a 429, 5xx, timeout or lost connection.")
]
MaxConsecutiveErrorsOpt = Annotated[
    int,
    typer.Option(
        "--max-consecutive-errors",
        min=0,
        max=1_000_000,
        help="Stop after this many cells in a row failed with the same kind of error (0: never stop).",
    ),
]


@app.command("grade")
def grade_command(
    collection: CollectionArg,
    prompt_class: Annotated[str, typer.Option("--prompt-class", help="Prompt class (rubric prompts lists them).")] = (
        "QuestionSelfRatedUnanswerablePromptWithChoices"
    ),
    backend: Annotated[str, typer.Option("--backend", help="hf, openai, similarity or hf-qa.")] = "similarity",
    model: Annotated[
        str | None, typer.Option("--model", help="Hub id, local path, .gguf file, smollm2, minilm.")
    ] = None,
    mode: Annotated[str, typer.Option("--mode", help="generate (parity) or score (one forward pass).")] = "score",
    rubric_version: Annotated[
        int | None, typer.Option("--rubric-version", min=1, max=2**31 - 1, help="Default: newest.")
    ] = None,
    max_queries: Annotated[
        int | None, typer.Option("--max-queries", min=1, max=10_000_000, help="Grade only the first N queries.")
    ] = None,
    query: Annotated[list[str] | None, typer.Option("--query", help="Grade only this query; repeatable.")] = None,
    batch_tokens: Annotated[
        int, typer.Option("--batch-tokens", min=1, max=10_000_000, help="Padded tokens per model batch.")
    ] = 8192,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="auto, float32, bfloat16 or float16.")] = "auto",
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=16, max=1_000_000, help="Context window for truncation.")
    ] = 512,
    num_beams: Annotated[
        int | None, typer.Option("--num-beams", min=1, max=64, help="generate: beams (seq2seq: 5).")
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint.")] = None,
    endpoint: Annotated[str, typer.Option("--endpoint", help="openai: chat or completions.")] = "chat",
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=1024, help="openai: requests in flight.")] = 8,
    json_mode: Annotated[bool, typer.Option("--json-mode", help="Append the reference JSON instruction.")] = False,
    custom_prompt: Annotated[Path | None, typer.Option("--custom-prompt", help="Template file.")] = None,
    custom_parser: Annotated[str, typer.Option("--custom-parser", help="rating, yes_no or free.")] = "rating",
    seed: SeedOpt = None,
    max_new_tokens: MaxNewTokensOpt = None,
    timeout: TimeoutOpt = 120.0,
    max_retries: MaxRetriesOpt = 6,
    max_consecutive_errors: MaxConsecutiveErrorsOpt = 20,
) -> None:
    """Grade every cell of a collection; cached cells cost no model call, and a rerun resumes.

    An openai backend is preflighted first (one tiny request). Exit status: 0 every cell graded,
    1 some cells ended in error (or fail-fast stopped the run; rerun to resume), 2 a usage error.
    """
    from app.collections.service import get_collection
    from app.grading.engine import CellScope, grade_cells
    from app.grading.preflight import preflight_method
    from app.grading.service import GraderSpec, build_method, plan_for

    spec = GraderSpec(
        prompt_class=prompt_class,
        backend=backend,  # type: ignore[arg-type]
        model=model,
        mode=mode,  # type: ignore[arg-type]
        device=device,
        dtype=dtype,
        batch_tokens=batch_tokens,
        max_tokens=max_tokens,
        num_beams=num_beams,
        base_url=base_url,
        endpoint=endpoint,  # type: ignore[arg-type]
        concurrency=concurrency,
        json_mode=json_mode,
        custom_prompt=str(custom_prompt) if custom_prompt else None,
        custom_parser=custom_parser,
        seed=seed,
        max_new_tokens=max_new_tokens,
        timeout=timeout,
        max_retries=max_retries,
        max_consecutive_errors=max_consecutive_errors,
    )
    _check_choice("--backend", backend, ("hf", "openai", "similarity", "hf-qa"))
    _check_choice("--mode", mode, ("generate", "score"))
    scope = CellScope(query_ids=frozenset(query) if query else None, max_queries=max_queries)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        method = build_method(spec)
        cells = plan_for(session, target, spec, rubric_version, scope)
        session.commit()  # no transaction stays open across the preflight or the model calls
        checked = preflight_method(method) if cells else None
        if checked is not None:
            err.print(checked.describe())
        with _grading_progress(len(cells)) as update:

            def commit_batch(report: Any) -> None:
                session.commit()
                update(report)

            report = grade_cells(
                session, method, cells, after_batch=commit_batch, max_consecutive_errors=max_consecutive_errors
            )
    label = method.config()
    err.print(
        f"graded {len(cells) - report.not_sent} cells of {collection!r} with {label.model} / {label.prompt_class}: "
        f"{report.graded} model prompts, {report.cached} cached, {report.deduplicated} deduplicated, "
        f"{report.errors} errors",
        soft_wrap=True,
    )
    _print_run_summary(report)
    if report.errors or report.stopped:
        raise typer.Exit(1)


def _print_run_summary(report: Any) -> None:
    """Errors by kind (count and one example each), flagged score grades, and why a run stopped."""
    from app.config import get_settings

    if report.errors:
        err.print("errors by kind:")
        for line in report.summary.lines():
            err.print(f"  {line}", soft_wrap=True)
    if report.low_mass:
        threshold = get_settings().score_min_valid_mass
        err.print(
            f"flagged: {report.low_mass} score grades with valid_mass < {threshold} (their grade tokens held less "
            "than that share of the next-token distribution; see README, score mode over HTTP)",
            soft_wrap=True,
        )
    if report.stopped:
        resume = f"{report.not_sent} cells not sent (rerun the same command to resume)"
        err.print(f"{report.stopped}; {resume}", soft_wrap=True)


def _check_choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        _fail(f"{option} must be one of {', '.join(allowed)}, not {value!r}")


@contextmanager
def _grading_progress(total: int) -> Iterator[Callable[[Any], None]]:
    """A bar with ETA and the cache-hit count; silent when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield lambda _report: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("grading"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[cached]} cached · {task.fields[errors]} errors"),
        TimeRemainingColumn(),
        console=err.console(),
        transient=True,
    ) as progress:
        task = progress.add_task("grading", total=total, cached=0, errors=0)
        yield lambda r: progress.update(task, completed=r.done, cached=r.cached, errors=r.errors)


@app.command("generate")
def generate_command(
    collection: CollectionArg,
    kind: Annotated[str, typer.Option("--kind", help="questions or nuggets.")] = "questions",
    backend: Annotated[str, typer.Option("--backend", help="hf (a local causal LM) or openai.")] = "hf",
    model: Annotated[str | None, typer.Option("--model", help="Hub id, local path, .gguf, smollm2.")] = None,
    style: Annotated[str, typer.Option("--style", help="dl, car, paper-dl or paper-car.")] = "dl",
    n: Annotated[int, typer.Option("--n", min=1, max=1000, help="Items to ask for per query (dl style).")] = 10,
    query: Annotated[list[str] | None, typer.Option("--query", help="Only this query; repeatable.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint.")] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    seed: SeedOpt = None,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", min=1, max=131_072, help="Output tokens per drafted answer.")
    ] = 512,
    timeout: TimeoutOpt = 120.0,
    max_retries: MaxRetriesOpt = 6,
    max_consecutive_errors: MaxConsecutiveErrorsOpt = 20,
) -> None:
    """Draft a test bank with an LLM into a draft rubric version (accept it with `rubric accept-draft`).

    An openai backend is preflighted first (one tiny request) and fails in seconds when it cannot answer.
    """
    from app.collections.service import get_collection
    from app.grading.preflight import preflight_backend
    from app.grading.service import GraderSpec, build_backend
    from app.rubrics.generation import draft_bank

    _check_choice("--kind", kind, ("questions", "nuggets"))
    _check_choice("--style", style, ("dl", "car", "paper-dl", "paper-car"))
    _check_choice("--backend", backend, ("hf", "openai"))
    spec = GraderSpec(
        backend=backend,  # type: ignore[arg-type]
        model=model,
        base_url=base_url,
        device=device,
        max_new_tokens=max_new_tokens,
        seed=seed,
        timeout=timeout,
        max_retries=max_retries,
        max_consecutive_errors=max_consecutive_errors,
    )
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        session.commit()  # no transaction stays open across the preflight
        drafter = build_backend(spec)
        checked = preflight_backend(drafter, "generate")
        if checked is not None:
            err.print(checked.describe())
        report = draft_bank(
            session,
            target,
            drafter,
            kind=kind,  # type: ignore[arg-type]
            style=style,  # type: ignore[arg-type]
            n=n,
            query_ids=query,
        )
    if report.version_number is None:
        _fail(f"nothing drafted; per query: {report.failures}")
    err.print(f"drafted {report.items} {kind} into draft rubric version {report.version_number}")
    for query_id, why in report.failures.items():
        err.print(f"  {query_id}: {why}", highlight=False, markup=False)


@app.command("accept-draft")
def accept_draft_command(
    collection: CollectionArg,
    version: Annotated[int, typer.Argument(min=1, max=2**31 - 1, help="Draft rubric version number.")],
    item: Annotated[list[str] | None, typer.Option("--item", help="Accept only this item id; repeatable.")] = None,
    user: Annotated[str, typer.Option("--user", help="Recorded as the author.")] = "cli",
) -> None:
    """Publish a draft: the newest published items plus the accepted drafted items (all by default)."""
    from app.collections.service import get_collection
    from app.grading.service import rubric_version
    from app.models import BankItem
    from app.rubrics.generation import accept_draft

    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        draft = rubric_version(session, target, version)
        assert draft is not None
        drafted = draft.bank_meta.get("draft_items", [])
        ids = item or [session.get_one(BankItem, pk).item_id for pk in drafted]
        published = accept_draft(session, target, draft, ids, user)
        number = published.number
    err.print(f"published rubric version {number}")


@app.command("prompts")
def prompts_command() -> None:
    """List the prompt classes, with their type, parser and template hash."""
    from app.grading.prompts import get_prompt_class, prompt_class_names

    for name in prompt_class_names():
        prompt = get_prompt_class(name)
        typer.echo(
            f"{name}\t{prompt.prompt_type}\t{prompt.parser}\t{prompt.template_hash()[:12]}\t{prompt.description}"
        )


review_app = typer.Typer(help="The judges' review queue: the next cells to review, progress and agreement.")
app.add_typer(review_app, name="review")
ReviewFormatOpt = Annotated[str, typer.Option("--format", help="table or json.")]


def _review_format(fmt: str) -> str:
    if fmt not in ("table", "json"):
        _fail(f"unknown format {fmt!r}: use table or json")
    return fmt


@review_app.command("next")
def review_next(
    collection: CollectionArg,
    mode: Annotated[str, typer.Option("--mode", help="priority (effect × uncertainty) or uniform (PPI sample).")] = (
        "priority"
    ),
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, max=2**32 - 1, help="Uniform mode; default: the judge's own.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="How many cells.")] = 10,
    judge: Annotated[str, typer.Option("--judge", help="Whose queue (and uniform seed).")] = "cli",
    query: Annotated[str | None, typer.Option("--query", help="Only this query's cells.")] = None,
    exclude: Annotated[str, typer.Option("--exclude", help="any: cells anyone reviewed; mine: the judge's.")] = "any",
    min_rating: Annotated[int, typer.Option("--min-rating", min=0, max=5, help="The Cover threshold.")] = 4,
    grader: GraderOpt = None,
    fmt: ReviewFormatOpt = "table",
) -> None:
    """The next cells of a judge's review queue, with why each was chosen."""
    from app.collections.service import get_collection
    from app.review.queue import QueueRequest, next_cells

    output = _review_format(fmt)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        request = QueueRequest(
            judge=judge,
            mode=mode,  # type: ignore[arg-type]  # checked by QueueRequest.check
            grader_id=grader,
            query_id=query,
            seed=seed,
            exclude=exclude,  # type: ignore[arg-type]  # checked by QueueRequest.check
            min_rating=min_rating,
        )
        queue = next_cells(session, target, request, limit=limit)
    if output == "json":
        typer.echo(json.dumps(queue.as_json(), indent=2))
        return
    err.print(f"{queue.remaining} of {queue.total} cells left · grader #{queue.grader.id} · {queue.mode}")
    # The uniform sample's order is chance, so its cells carry their row, not a priority and its parts.
    why = "row\titem of row" if queue.mode == "uniform" else "priority\teffect\tuncertainty\tsystems\tdisagree"
    typer.echo(f"#\tquery\tpassage\titem\tgrade\tE[grade]\t{why}")
    for c in queue.cells:
        expected = "" if c.expected is None else f"{c.expected:.2f}"
        grade = "" if c.rating is None else str(c.rating)
        reason = (
            f"{c.row}\t{c.row_item} of {c.row_items}"
            if queue.mode == "uniform"
            else f"{c.priority:.3g}\t{c.effect:.3g}\t{c.uncertainty:.2f}\t{c.reach}\t{'yes' if c.disagree else ''}"
        )
        typer.echo(f"{c.position}\t{c.query_id}\t{c.passage_id}\t{c.item_id}\t{grade}\t{expected}\t{reason}")


@review_app.command("stats")
def review_stats_command(
    collection: CollectionArg,
    min_rating: Annotated[int, typer.Option("--min-rating", min=0, max=5, help="The Cover threshold of κ.")] = 4,
    grader: GraderOpt = None,
    fmt: ReviewFormatOpt = "table",
) -> None:
    """Progress per judge and query, κ between judges, and each judge against the grader over time."""
    from dataclasses import asdict

    from app.collections.service import get_collection
    from app.review.agreement import review_agreement
    from app.review.progress import progress
    from app.review.queue import QueueRequest, next_cells

    output = _review_format(fmt)
    with _user_errors(), _session() as session:
        target = get_collection(session, collection)
        in_queue = next_cells(session, target, QueueRequest("cli", grader_id=grader, min_rating=min_rating)).per_query
        done = progress(session, target, in_queue)
        agreement = review_agreement(session, target, threshold=min_rating)
    if output == "json":
        typer.echo(json.dumps({"progress": asdict(done), "agreement": asdict(agreement)}, indent=2))
        return
    typer.echo(f"reviewed {done.reviewed} of {done.in_queue} cells in the queue")
    typer.echo("judge\treviewed\taccepted\tchanged\tqueue\tsample\tlast")
    for j in done.judges:
        typer.echo(f"{j.judge}\t{j.reviewed}\t{j.accepted}\t{j.changed}\t{j.queue}\t{j.sample}\t{j.last_at or ''}")
    typer.echo("\nquery\treviewed\tin_queue")
    for q in done.queries:
        typer.echo(f"{q.query_id}\t{q.reviewed}\t{q.in_queue}")
    if not agreement.pairs:
        typer.echo("\nno cell graded by two judges yet: no agreement between judges")
    else:
        typer.echo(f"\njudges\tcells\texact\tkappa@{agreement.threshold}")
    for p in agreement.pairs:
        typer.echo(f"{p.first}·{p.second}\t{p.agreement.n}\t{p.agreement.exact:.2f}\t{p.agreement.kappa:.2f}")
    if not agreement.trend:
        typer.echo("\nno judge's grade of a cell the grader graded yet: no agreement with the grader")
        return
    typer.echo(f"\njudge\t{agreement.granularity}\tratings\texact\tkappa vs grader")
    for t in agreement.trend:
        typer.echo(f"{t.judge}\t{t.period}\t{t.agreement.n}\t{t.agreement.exact:.2f}\t{t.agreement.kappa:.2f}")


collections_app = typer.Typer(help="List collections with their sizes; rename one.")
app.add_typer(collections_app, name="collections")


@collections_app.callback(invoke_without_command=True)
def collections_command(context: typer.Context) -> None:
    """List collections with their sizes (name, queries, passages, systems), or run a subcommand."""
    if context.invoked_subcommand is not None:
        return
    from app.collections.summaries import collection_summaries
    from app.db import get_engine
    from app.migrate import is_behind

    # a connection, not a session: the listing needs no ORM, and loading it would cost 0.1 s of the start
    with _user_errors(), get_engine().connect() as connection:
        # it reads only columns every schema has: an older database is refused here, as every other command refuses it
        if is_behind(connection):
            _fail(UNMIGRATED)
        for row in collection_summaries(connection):
            typer.echo("\t".join(str(v) for v in row))


@collections_app.command("rename")
def collections_rename(
    old: Annotated[str, typer.Argument(help="The collection's current name.")],
    new: Annotated[str, typer.Argument(help="Its new name (letters, digits, '.', '_', '-').")],
) -> None:
    """Rename a collection, e.g. one stored before the naming rule, which the web cannot link to."""
    from app.collections.service import rename_collection

    with _user_errors(), _session() as session:
        rename_collection(session, old, new)
    err.print(f"renamed collection {old!r} to {new!r}")


user_app = typer.Typer(help="Accounts of the web workbench.", no_args_is_help=True)
app.add_typer(user_app, name="user")


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="User name.")],
    role: Annotated[str, typer.Option("--role", help="viewer, judge or organizer.")] = "viewer",
    password: Annotated[
        str | None, typer.Option("--password", help="Default: asked for on the terminal.", envvar="RUBRIC_PASSWORD")
    ] = None,
) -> None:
    """Create a user of the web workbench (argon2-hashed password)."""
    from app.accounts.service import create_user
    from app.errors import DomainError

    secret = password or typer.prompt("password", hide_input=True, confirmation_prompt=True)
    try:  # a refused name or password, or a taken name, exits 2 (app.accounts.names, .passwords)
        with _user_errors(), _session() as session:
            create_user(session, name, role, secret)
    except DomainError as error:
        _fail(str(error))
    err.print(f"created {role} {name!r}")


UserNameArg = Annotated[str, typer.Argument(help="User name (any letter case).")]


def _manage_user(name: str, action: Callable[[Any, Any], None], done: str) -> None:
    """One account action by name; a refusal (unknown user, bad role or password, last organizer) exits 2."""
    from app.accounts.service import user_or_404

    with _user_errors(), _session() as session:
        account = user_or_404(session, name)
        action(session, account)
        shown = account.name
    err.print(f"{shown}: {done}")


@user_app.command("set-role")
def user_set_role(name: UserNameArg, role: Annotated[str, typer.Argument(help="viewer, judge or organizer.")]) -> None:
    """Change a user's role (in force at their next request); the last organizer cannot be demoted."""
    from app.accounts.service import set_role

    _manage_user(name, lambda session, account: set_role(session, account, role), f"role set to {role}")


@user_app.command("reset-password")
def user_reset_password(
    name: UserNameArg,
    password: Annotated[
        str | None, typer.Option("--password", help="Default: asked for on the terminal.", envvar="RUBRIC_PASSWORD")
    ] = None,
) -> None:
    """Set a new password (the password rules apply); every session of the user ends."""
    from app.accounts.service import reset_password

    secret = password or typer.prompt("new password", hide_input=True, confirmation_prompt=True)
    _manage_user(name, lambda session, account: reset_password(session, account, secret), "password reset")


@user_app.command("disable")
def user_disable(name: UserNameArg) -> None:
    """Stop a user signing in and end their sessions; the last organizer cannot be disabled."""
    from app.accounts.service import disable_user

    _manage_user(name, disable_user, "disabled; their sessions ended")


@user_app.command("enable")
def user_enable(name: UserNameArg) -> None:
    """Let a disabled user sign in again."""
    from app.accounts.service import enable_user

    _manage_user(name, enable_user, "enabled")


P = ParamSpec("P")
R = TypeVar("R")


def long_lived(command: Callable[P, R]) -> Callable[P, R]:
    """A command that serves (serve, demo, worker): its process is long-lived, so it clears the one-shot
    mark ``main`` set (app/collector.py) before it runs, and a cold snapshot build settles the heap for
    the requests that follow (app/collections/snapshot.py)."""

    @functools.wraps(command)
    def serving(*args: P.args, **kwargs: P.kwargs) -> R:
        collector.mark_one_shot(False)
        return command(*args, **kwargs)

    return serving


@app.command("serve")
@long_lived
def serve_command(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
) -> None:
    """Serve the web workbench (jobs go to Celery when RUBRIC_REDIS_URL is set, else run in-process)."""
    import uvicorn

    from app.web.main import create_app

    # Open event streams never end by themselves: give them a few seconds on SIGTERM, then close them.
    uvicorn.run(create_app(), host=host, port=port, log_level="info", timeout_graceful_shutdown=5)


@app.command("demo")
@long_lived
def demo_command(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
    directory: Annotated[Path, typer.Option("--dir", help="Where the demo database lives.")] = Path("rubric-demo"),
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Set up and grade, then exit.")] = False,
) -> None:
    """Set up a SQLite demo (sample collection, graded by the default model, demo accounts) and serve it."""
    from app.demo import prepare_demo

    accounts = prepare_demo(directory)
    typer.echo("Demo accounts (name / password):")
    for name, role, password in accounts:
        typer.echo(f"  {role:<10} {name} / {password}")
    if no_serve:
        return
    typer.echo(f"Serving on http://{host}:{port}  (Ctrl-C stops)")
    serve_command(host=host, port=port)


@app.command("worker")
@long_lived
def worker_command(
    queues: Annotated[str, typer.Option("--queues", help="Comma-separated: gpu (grading), default (CPU).")] = (
        "gpu,default"
    ),
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=1024, help="Worker processes (1 = solo pool).")
    ] = 1,
    loglevel: Annotated[str, typer.Option("--loglevel")] = "info",
) -> None:
    """Start a Celery worker on RUBRIC_REDIS_URL (one model per process, loaded on the first batch)."""
    from app.config import get_settings

    if not get_settings().redis_url:
        _fail("RUBRIC_REDIS_URL is not set: a worker needs Redis (without it, jobs run in the web process)")
    from worker.celery_app import app as celery_app
    from worker.celery_app import consume_queues

    consume_queues([q.strip() for q in queues.split(",") if q.strip()])
    pool = ["--pool", "solo"] if concurrency == 1 else ["--pool", "prefork", "--concurrency", str(concurrency)]
    celery_app.worker_main(
        ["worker", "--queues", queues, *pool, "--loglevel", loglevel, "--without-gossip", "--without-mingle"]
    )


# How long the ``rubric`` script runs before the cyclic garbage collector is switched on (see main).
GC_AFTER_SECONDS = 1.0


def collect_garbage_after(seconds: float) -> threading.Timer:
    """Pause the cyclic garbage collector now and end this pause after ``seconds`` (app/collector.py:
    an import that pauses it too keeps it paused until it ends; a forked child gets it back at once)."""
    timer = threading.Timer(seconds, collector.pause())
    timer.daemon = True  # a command that ends first does not wait for it
    timer.start()
    return timer


def main() -> None:
    """The ``rubric`` script. Start-up builds a few hundred thousand objects that live as long as the
    process (typer's, pydantic's and SQLAlchemy's modules and classes), and the cyclic collector would
    scan them again and again while they are built: a tenth of a short command's time (issue 16,
    bench/cli_start.py). So it is off for the first second, which most commands do not outlive; a
    longer one (serve, worker, grade) has it from then on.

    A command ends after its answer: the process is one-shot (app/collector.py), except for the
    commands that serve (serve, demo, worker: ``long_lived``)."""
    collector.mark_one_shot()
    collect_garbage_after(GC_AFTER_SECONDS)
    app()


if __name__ == "__main__":
    main()
