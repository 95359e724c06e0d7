"""Our leaderboard and qrels exports, judged by TREC AutoJudge's own loader and meta-evaluator.

``rubric export leaderboard`` writes the layouts autojudge-evaluate reads; here THEIR
``LeaderboardEvaluator`` loads each export, correlates it with a truth leaderboard (the paper's
official DL19 ranks) and must give the Kendall τ our ``rubric leaderboard`` reports. Conventions
matched: both are τ-b (scipy's, through pandas on their side), the truth's value must grow with
quality (we write −rank), and their ``on_missing="skip"`` keeps the systems both sides rank,
as ours correlates only officially ranked systems.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import select, update

from app.collections.queries import pool_keys
from app.collections.service import get_collection
from app.errors import Invalid
from app.evaluation.qrels import format_qrels
from app.leaderboards.export import EvalRow, write_leaderboard
from app.models import BankItem
from tests.conftest import TEST_DATA, Database
from tests.helpers import cli

OFFICIAL = TEST_DATA / "dl19_paper_official_ranks.json"
FORMATS = {"trec_eval": "runs", "ir_measures": "board.tsv", "jsonl": "board.jsonl"}


def _mark_every_other_item_okay(db: Database) -> None:
    """Give the dev bank importances (it has none): the nugget scores must then read them."""
    with db.session() as session:
        ids = sorted(session.scalars(select(BankItem.id)))
        session.execute(update(BankItem).where(BankItem.id.in_(ids[::2])).values(importance="okay"))
        session.execute(update(BankItem).where(BankItem.id.in_(ids[1::2])).values(importance="vital"))
        session.commit()


def _truth(path: Path) -> Path:
    """The official ranks as an ir_measures leaderboard: one ``all`` row per run, value −rank."""
    ranks = json.loads(OFFICIAL.read_text())
    path.write_text("".join(f"{system}\tall\tofficial\t{-rank}\n" for system, rank in ranks.items()))
    return path


def _our_board(measure: str) -> dict:
    out = cli(
        "leaderboard", "dl19", "--measure", measure, "--official", OFFICIAL, "--bootstrap", "0", "--format", "json"
    )
    return json.loads(out)


@pytest.mark.parametrize("measure", ["nugget-vital", "nugget-strict-weighted", "cover-weighted", "P@20"])
def test_their_meta_evaluation_of_our_export_gives_our_kendall_tau(
    dev_database: Database, autojudge: ModuleType, tmp_path: Path, measure: str
) -> None:
    from autojudge_evaluate.evaluation import LeaderboardEvaluator

    _mark_every_other_item_okay(dev_database)
    ours = _our_board(measure)
    truth = _truth(tmp_path / "truth.tsv")
    for fmt, name in FORMATS.items():
        cli("export", "leaderboard", "dl19", "--measure", measure, "--format", fmt, "--out", tmp_path / name)
        evaluator = LeaderboardEvaluator(
            truth, eval_format=fmt, on_missing="skip", correlation_methods=["kendall", "spearman"]
        )
        theirs = evaluator.evaluate(tmp_path / name)[("official", measure)]
        assert theirs["kendall"] == pytest.approx(ours["correlation"]["kendall"], abs=1e-12), fmt
        assert theirs["spearman"] == pytest.approx(ours["correlation"]["spearman"], abs=1e-12), fmt


def test_importance_reaches_the_nugget_scores_and_their_loader_reads_every_value(
    dev_database: Database, autojudge: ModuleType, tmp_path: Path
) -> None:
    from autojudge_evaluate.eval_results import load

    _mark_every_other_item_okay(dev_database)
    vital, every = _our_board("nugget-vital"), _our_board("nugget-all")
    per_query = {s["system"]: s["per_query"] for s in vital["systems"]}
    assert per_query != {s["system"]: s["per_query"] for s in every["systems"]}
    cli(
        "export", "leaderboard", "dl19", "--measure", "nugget-vital", "--format", "jsonl", "--out", tmp_path / "v.jsonl"
    )
    result = load(tmp_path / "v.jsonl", "jsonl", recompute_aggregates=False, verify=True, on_missing="ignore")
    loaded: dict[str, dict[str, float]] = {}
    for entry in result.entries:
        loaded.setdefault(entry.run_id, {})[entry.topic_id] = float(entry.value)
    for system in vital["systems"]:
        if system["system"] != "_overall_":
            assert loaded[system["system"]] == {**system["per_query"], "all": system["score"]}


def test_exported_qrels_are_read_by_their_reader_and_overlap_as_ours(
    dev_database: Database, autojudge: ModuleType, tmp_path: Path
) -> None:
    from autojudge_base.qrels.qrels import read_qrel_file
    from autojudge_evaluate.nugget_doc_eval import set_overlap

    from app.collections.queries import load_judgments

    cli("export", "qrels", "dl19", "--out", tmp_path / "ours.qrels", "--label", "count", "--min-rating", "4")
    with dev_database.session() as session:
        judgments = load_judgments(session, pool_keys(session, get_collection(session, "dl19")))
    manual = {q: {p: max(js) for p, js in docs.items()} for q, docs in judgments.items()}
    (tmp_path / "manual.qrels").write_text(format_qrels(manual))
    ours = {}
    for line in (tmp_path / "ours.qrels").read_text().splitlines():
        query, _, passage, label = line.split()
        ours.setdefault(query, {})[passage] = int(label)
    predicted = read_qrel_file(tmp_path / "ours.qrels")
    assert {(r.topic_id, r.doc_id): r.grade for r in predicted.rows} == {
        (q, p): g for q, docs in ours.items() for p, g in docs.items()
    }
    overlap = set_overlap(read_qrel_file(tmp_path / "manual.qrels"), predicted, relevance_threshold=2)
    for result in overlap:
        relevant = {p for p, g in manual.get(result.topic_id, {}).items() if g >= 2}
        retrieved = {p for p, g in ours.get(result.topic_id, {}).items() if g >= 2}
        assert (result.tp, result.fp, result.fn) == (
            len(relevant & retrieved),
            len(retrieved - relevant),
            len(relevant - retrieved),
        )


def test_ids_the_column_layouts_cannot_hold_are_refused(tmp_path: Path) -> None:
    rows = [EvalRow("run a", "q1", "nugget-all", 0.5), EvalRow("run a", "all", "nugget-all", 0.5)]
    with pytest.raises(Invalid, match="whitespace"):
        write_leaderboard(rows, "ir_measures", tmp_path / "x.tsv")
    write_leaderboard(rows, "jsonl", tmp_path / "x.jsonl")  # jsonl holds any id
    with pytest.raises(Invalid, match="trec_eval file"):
        write_leaderboard([EvalRow(".hidden", "q1", "cover", 1.0)], "trec_eval", tmp_path / "runs")
    for hostile in ("../escape", "/etc/x", "a/b", "..", "nul\x00", "é"):
        with pytest.raises(Invalid, match="trec_eval file"):  # a good run first: nothing is written at all
            rows = [EvalRow("good", "all", "cover", 1.0), EvalRow(hostile, "all", "cover", 1.0)]
            write_leaderboard(rows, "trec_eval", tmp_path / "t")
    assert not (tmp_path / "t").exists() and not (tmp_path / "escape").exists()
    with pytest.raises(Invalid, match="cannot write"):
        write_leaderboard(rows, "jsonl", tmp_path)  # a directory where a file goes


def test_export_refuses_bad_options_as_user_errors(dev_database: Database, tmp_path: Path) -> None:
    out = tmp_path / "x"
    assert "format must be one of" in cli(
        "export", "leaderboard", "dl19", "--measure", "cover", "--format", "csv", "--out", out, expect=2
    )
    assert "partial ≤ support" in cli(
        "export", "leaderboard", "dl19", "--measure", "nugget-all(support=2,partial=3)", "--out", out, expect=2
    )
