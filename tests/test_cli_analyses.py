"""The CLI contract of leaderboard, export qrels, agreement and verify, on the DL19 dev data.

Each test reads a private copy of the session's dl19-dev import (``dev_database``, tests/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TEST_DATA, Database
from tests.helpers import cli, interchange_records

OFFICIAL = TEST_DATA / "dl19_paper_official_ranks.json"


def _max_ratings(dl19_dev: Path) -> dict[tuple[str, str], int]:
    return {
        (q, p["paragraph_id"]): max(r["self_rating"] for r in p["exam_grades"][0]["self_ratings"])
        for q, paragraphs in interchange_records(dl19_dev / "passages-graded.jsonl.gz")
        for p in paragraphs
    }


def test_leaderboard_json_contract(dev_database: Database, dl19_dev: Path) -> None:
    out = cli(
        "leaderboard",
        "dl19",
        "--measure",
        "P@20",
        "--min-rating",
        "3",
        "--label",
        "max",
        "--reference-rounding",
        "--official",
        OFFICIAL,
        "--format",
        "json",
        "--bootstrap",
        "200",
    )
    board = json.loads(out)
    assert board["measure"] == "P@20"
    systems = {s["system"]: s for s in board["systems"]}
    assert len(systems) == 37
    row = systems["idst_bert_p1"]
    assert set(row) == {"system", "score", "stderr", "ci_low", "ci_high", "official_rank", "per_query"}
    assert row["official_rank"] == 1 and len(row["per_query"]) == 10
    assert row["ci_low"] <= sum(row["per_query"].values()) / 10 <= row["ci_high"]
    assert round(row["score"], 3) == row["score"]  # reference rounding prints 3 decimals
    correlation = board["correlation"]
    assert set(correlation) == {"spearman", "kendall", "tau_ap", "n_systems"}
    assert correlation["n_systems"] == 33  # UNH_exDL_bm25 and the 3 unranked runs are left out


def test_p20_by_hand_on_one_system(dev_database: Database, dl19_dev: Path) -> None:
    labels = _max_ratings(dl19_dev)
    per_query: dict[str, int] = {}
    for q, paragraphs in interchange_records(dl19_dev / "passages-graded.jsonl.gz"):
        for p in paragraphs:
            for r in p["paragraph_data"]["rankings"]:
                if r["method"] == "p_bert" and labels[(q, p["paragraph_id"])] >= 3:
                    per_query[q] = per_query.get(q, 0) + 1
    board = json.loads(cli("leaderboard", "dl19", "--measure", "P@20", "--min-rating", "3", "--format", "json"))
    p_bert = next(s for s in board["systems"] if s["system"] == "p_bert")
    assert p_bert["per_query"] == pytest.approx({q: per_query.get(q, 0) / 20 for q in p_bert["per_query"]})
    assert board["correlation"] is None


def test_cover_leaderboard_has_overall_row_and_tables(dev_database: Database) -> None:
    board = json.loads(cli("leaderboard", "dl19", "--measure", "cover", "--min-rating", "3", "--format", "json"))
    assert board["systems"][0]["system"] == "_overall_"
    for fmt, marker in [("tsv", "system\tn-cover"), ("md", "| system |"), ("latex", "\\begin{tabular}")]:
        assert marker in cli("leaderboard", "dl19", "--measure", "n-cover", "--min-rating", "3", "--format", fmt)


def test_per_query_correlation_against_manual_judgments(dev_database: Database) -> None:
    board = json.loads(
        cli(
            "leaderboard",
            "dl19",
            "--measure",
            "NDCG@10",
            "--format",
            "json",
            "--per-query-correlation",
            "--official",
            OFFICIAL,
        )
    )
    assert len(board["per_query_correlation"]) == 10


def test_missing_official_system_is_a_clear_error(dev_database: Database, tmp_path: Path) -> None:
    official = tmp_path / "official.json"
    official.write_text(json.dumps({"p_bert": 1, "no_such_run": 2}))
    message = cli("leaderboard", "dl19", "--measure", "P@20", "--official", official, expect=2)
    assert "no_such_run" in message


def test_export_qrels_lists_every_graded_passage(dev_database: Database, dl19_dev: Path, tmp_path: Path) -> None:
    out = tmp_path / "exam.qrels"
    cli("export", "qrels", "dl19", "--out", out, "--label", "max")
    lines = out.read_text().splitlines()
    labels = _max_ratings(dl19_dev)
    assert len(lines) == len(labels) == 2187
    for line in lines:
        query_id, zero, passage_id, grade = line.split()
        assert zero == "0" and int(grade) == labels[(query_id, passage_id)]


def test_agreement_json_counts_are_consistent(dev_database: Database) -> None:
    tables = json.loads(cli("agreement", "dl19", "--min-answers", "2", "--min-judgment", "2", "--format", "json"))
    assert [t["table"] for t in tables] == ["GRADED", "MERGE", "LENIENT", "STRICT"]
    strict = tables[3]
    mapped = strict["kappa"][0]
    assert [mapped["tp"], mapped["fp"]] == strict["counts"][0]
    assert [mapped["fn"], mapped["tn"]] == strict["counts"][1]
    assert mapped["tp"] + mapped["fp"] + mapped["fn"] + mapped["tn"] == 2187
    assert "kappa" in cli("agreement", "dl19", "--format", "latex")


def test_verify_analyses(dev_database: Database) -> None:
    bad = cli("verify", "dl19", "bad-questions", "--min-judgment", "1", "--min-rating", "4")
    assert bad.splitlines()[0] == "query\titem\tcount\titem_text"
    assert len(bad.splitlines()) > 1
    uncovered = cli("verify", "dl19", "uncovered", "--min-judgment", "2", "--min-rating", "4", "--format", "json")
    rows = json.loads(uncovered)[0]["rows"]
    assert rows and all(r["worst_judgment"] >= 2 and r["best_rating"] < 4 for r in rows)
    grading = cli("verify", "dl19", "grading", "--format", "tsv")
    assert "rating" in grading.splitlines()[0]
    grids = json.loads(cli("verify", "dl19", "grid", "--format", "json"))
    assert len(grids) == 10 and len(grids[0]["columns"]) == 2 + 2 * 10
