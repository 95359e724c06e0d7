"""Another judge's graded qrels (``--judgments-from``) against our grader and the manual judgments: κ by hand,
and the leaderboard on its qrels against ir_measures run directly on the files.

The agreement page's section: tests/web/test_external_web.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import ir_measures
import pytest
from sqlalchemy import func, select

from app.models import Grade, Passage, PoolEntry, Query
from app.samples import OFFICIAL, PASSAGES
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import web_db_any as web_db_any  # the graded sample, on both databases

# the judge agrees with the manual grades, except: passage 3 one grade lower, passage 4 one higher, passage 8 unjudged
SHIFT = {"3": -1, "4": +1}


def _judge_qrels(tmp_path: Path) -> Path:
    lines = [
        f"{q} 0 {p} {max(r + SHIFT.get(p.rsplit('-', 1)[1], 0), 0)}\n"
        for q, passages in PASSAGES.items()
        for p, r, _ in passages
        if not p.endswith("-8")
    ]
    path = tmp_path / "umbrela.qrels"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _kappa(tp: int, fp: int, fn: int, tn: int) -> float:
    n = tp + fp + fn + tn
    p_o = (tp + tn) / n
    p_e = (tp + fp) * (tp + fn) / n**2 + (fn + tn) * (fp + tn) / n**2
    return (p_o - p_e) / (1 - p_e)


def _grader_max_ratings(database: Database) -> dict[tuple[str, str], int]:
    """The graded sample's labels read straight from the grade rows: the max self-rating per passage."""
    with database.session() as session:
        rows = session.execute(
            select(Query.query_id, Passage.passage_id, func.max(Grade.self_rating))
            .join(PoolEntry, PoolEntry.id == Grade.pool_entry_pk)
            .join(Query, Query.id == PoolEntry.query_pk)
            .join(Passage, Passage.id == PoolEntry.passage_pk)
            .group_by(Query.query_id, Passage.passage_id)
        ).all()
    return {(q, p): int(r) for q, p, r in rows}


def test_kappa_against_another_judge_by_hand(web_db_any: Database, tmp_path: Path) -> None:
    cli("import", "sample", "--judgments-from", f"umbrela={_judge_qrels(tmp_path)}")
    result = json.loads(cli("agreement", "sample", "--against", "umbrela", "--min-judgment", "2", "--format", "json"))
    assert [result[k] for k in ("judge", "n_judgments", "min_external", "min_judgment")] == ["umbrela", 21, 2, 2]
    # per query, 7 passages judged by both: relevant (≥ 2) manual {1, 2, 3}, the judge {1, 2, 4} (aurora-3 is 2)
    judge = result["judge_vs_manual"]
    assert (judge["tp"], judge["fp"], judge["fn"], judge["tn"]) == (7, 3, 2, 9)
    assert judge["kappa"] == pytest.approx(38 / 73)  # p_o = 16/21, p_e = (10·9 + 11·12)/21² = 222/441
    assert judge["crosstab"]["rows"] == [0, 1, 2, 3] and sum(map(sum, judge["crosstab"]["counts"])) == 21

    ratings = _grader_max_ratings(web_db_any)
    external = {(q, p): max(r + SHIFT.get(p.rsplit("-", 1)[1], 0), 0) for q, ps in PASSAGES.items() for p, r, _ in ps}
    both = [k for k in ratings if k in external and not k[1].endswith("-8")]
    pairs = [(ratings[k] >= 4, external[k] >= 2) for k in both]
    counts = [sum(p and r for p, r in pairs), sum(p and not r for p, r in pairs)]
    counts += [sum(r and not p for p, r in pairs), sum(not p and not r for p, r in pairs)]
    grader = result["grader_vs_judge"]
    assert [grader["tp"], grader["fp"], grader["fn"], grader["tn"]] == counts and grader["n"] == len(both) == 21
    assert grader["kappa"] == pytest.approx(_kappa(*counts))
    assert result["min_rating"] == 4  # a self-rated grader: "rated ≥ 4", as in the paper
    # the grader against the manual judgments on the same 21 passages
    manual = {(q, p): r for q, ps in PASSAGES.items() for p, r, _ in ps}
    same = [(ratings[k] >= 4, manual[k] >= 2) for k in both]
    assert result["grader_vs_manual"]["tp"] == sum(p and r for p, r in same)

    levels = json.loads(cli("agreement", "sample", "--against", "umbrela", "--min-external", "3", "--format", "json"))
    assert levels["judge_vs_manual"]["first_level"] == 3 and levels["judge_vs_manual"]["second_level"] == 1
    assert "Agreement with judge umbrela" in cli("agreement", "sample", "--against", "umbrela", "--format", "md")


def test_leaderboard_on_the_judges_qrels_equals_ir_measures_on_the_files(web_db_any: Database, tmp_path: Path) -> None:
    qrels = _judge_qrels(tmp_path)
    cli("import", "sample", "--judgments-from", f"umbrela={qrels}")
    cli("export", "runs", "sample", "--out", tmp_path / "runs")
    for measure, level, expected_measure in (
        ("NDCG@10", 2, ir_measures.nDCG @ 10),
        ("P@3", 2, ir_measures.P(rel=2) @ 3),
        ("P@3", 3, ir_measures.P(rel=3) @ 3),
    ):
        args = ["--measure", measure, "--judge", "umbrela", "--min-external", str(level), "--format", "json"]
        board = json.loads(cli("leaderboard", "sample", *args))
        for run in sorted((tmp_path / "runs").glob("*.run")):
            truth = ir_measures.calc_aggregate(
                [expected_measure], ir_measures.read_trec_qrels(str(qrels)), ir_measures.read_trec_run(str(run))
            )[expected_measure]
            system = next(s for s in board["systems"] if s["system"] == run.stem)
            assert system["score"] == pytest.approx(truth), (measure, level, run.stem)
    assert board["judge"] == "umbrela" and board["min_external"] == 3
    assert board["correlation"]["n_systems"] == len(OFFICIAL)  # against the official ranks
    assert board["against_grader"]["n_systems"] == len(OFFICIAL) and set(board["grader_scores"]) == set(OFFICIAL)
    table = cli("leaderboard", "sample", "--measure", "NDCG@10", "--judge", "umbrela")
    assert "judge: umbrela" in table and "vs grader\tkendall" in table


def test_unknown_judges_and_bad_levels_are_refused(web_db_any: Database, tmp_path: Path) -> None:
    none_yet = cli("agreement", "sample", "--against", "umbrela", expect=2)
    assert "no judge 'umbrela'" in none_yet and "--judgments-from NAME=FILE" in none_yet
    cli("import", "sample", "--judgments-from", f"umbrela={_judge_qrels(tmp_path)}")
    listed = cli("leaderboard", "sample", "--measure", "P@10", "--judge", "gpt-judge", expect=2)
    assert "no judge 'gpt-judge'" in listed and "imported judges: umbrela" in listed
    assert "trec_eval measure" in cli("leaderboard", "sample", "--measure", "cover", "--judge", "umbrela", expect=2)
    assert "no judge" in cli("agreement", "sample", "--against", "j" * 5000, expect=2)
    cli("agreement", "sample", "--against", "umbrela", "--min-external", "0", expect=2)
    cli("leaderboard", "sample", "--measure", "P@10", "--judge", "umbrela", "--min-external", "1001", expect=2)
