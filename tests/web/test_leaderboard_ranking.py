"""The leaderboard as a ranking: competition ranks with ties, the overall row apart, flags excluded on request,
significance of adjacent systems and of all pairs with Holm (the same numbers in the CLI and the web),
live triggers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.collections.service import get_collection
from app.db import session_scope
from app.evaluation.cover import OVERALL, cover_scores_of, cover_table
from app.evaluation.frame import GradeFrame
from app.evaluation.types import Leaderboard, SystemScore
from app.leaderboards.analysis import competition_ranks
from app.leaderboards.service import EvaluationData, LeaderboardRequest, evaluation_data
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.web.conftest import login

BOARD = {"measure": "cover", "min_rating": 4}


@pytest.fixture
def judge(web_db_any: Database) -> Iterator[tuple[TestClient, str]]:
    with TestClient(create_app()) as client:
        yield client, login(client, "judge")


def _board(client: TestClient, **params: Any) -> dict[str, Any]:
    response = client.get("/c/sample/leaderboard.json", params={**BOARD, **params})
    assert response.status_code == 200, response.text[:300]
    return response.json()


def _scores(board: dict[str, Any]) -> dict[str, float]:
    return {s["system"]: s["score"] for s in board["systems"]}


def _cover(data: EvaluationData, grades: GradeFrame) -> dict[str, float]:
    return {s.system: s.score for s in cover_scores_of(cover_table(grades, data.ranking, min_rating=4))}


def _data(version: int | None) -> EvaluationData:
    with session_scope() as session:
        request = LeaderboardRequest("cover", min_rating=4, rubric_version=version, bootstrap_samples=0)
        return evaluation_data(session, get_collection(session, "sample"), request)


def _moving_item(data: EvaluationData) -> tuple[str, str]:
    """(query id, item id) of the first item (in the frame's order) whose removal moves some score."""
    baseline = _cover(data, data.grades)
    grades = data.grades
    for entry, item in zip(grades.entry.tolist(), grades.item.tolist(), strict=True):
        query = grades.pool.query_ids[grades.pool.entry_query[entry]]
        if _cover(data, grades.without_item(query, grades.items[item])) != baseline:
            return query, grades.items[item]
    raise AssertionError("no item of the sample moves the board")


def test_excluding_a_flagged_item_is_removing_it_from_the_rubric(judge: tuple[TestClient, str]) -> None:
    client, token = judge
    before = _board(client)
    version = before["settings"]["rubric_version"]
    data = _data(version)
    query, item = _moving_item(data)
    flagged = client.post(
        "/c/sample/flag", data={"item_id": item, "reason": "spurious"}, headers={"X-CSRF-Token": token}
    )
    assert flagged.status_code == 200, flagged.text
    # the toggle off: a flag is an opinion, the board is unchanged; on: the item is gone from every query
    assert _scores(_board(client)) == _scores(before)
    after = _board(client, exclude_flagged=1)
    assert after["settings"]["exclude_flagged"] is True and before["settings"]["exclude_flagged"] is False
    assert _scores(after) == _cover(data, data.grades.without_item(query, item))
    assert _scores(after) != _scores(before)
    page = client.get("/c/sample/leaderboard", params={**BOARD, "exclude_flagged": 1}).text
    assert "flagged questions excluded" in page and 'name="exclude_flagged" value="1" checked' in page


def test_cli_and_web_give_the_same_significance(judge: tuple[TestClient, str]) -> None:
    client, _ = judge
    web = _board(client, significance=1, trials=2000)
    args = ["leaderboard", "sample", "--measure", "cover", "--min-rating", "4", "--significance", "--trials", "2000"]
    args += ["--grader", str(web["grader_id"]), "--rubric-version", str(web["settings"]["rubric_version"])]
    args += ["--bootstrap", "1000", "--seed", "42"]  # the page's bootstrap
    from_cli = json.loads(cli(*args, "--format", "json"))
    assert from_cli == web
    tests = web["significance"]
    ranked = [s["system"] for s in web["systems"] if s["system"] != OVERALL]
    assert [(t["better"], t["worse"]) for t in tests["adjacent"]] == list(zip(ranked, ranked[1:], strict=False))
    assert tests["trials"] == 2000 and tests["alpha"] == 0.05
    for pair in tests["adjacent"]:  # a new group starts exactly below a distinct pair
        step = tests["groups"][pair["worse"]] - tests["groups"][pair["better"]]
        assert step == (1 if pair["distinct"] else 0) and 0 < pair["p_randomisation"] <= 1
    # every pair, Holm per test: a pair's raw p is its adjacent one (same trials, same seed)
    pairs = {(t["better"], t["worse"]): t for t in tests["all_pairs"]["pairs"]}
    assert len(pairs) == len(ranked) * (len(ranked) - 1) // 2
    for pair in tests["adjacent"]:
        same = pairs[pair["better"], pair["worse"]]
        assert same["p_randomisation"] == pair["p_randomisation"] and same["p_t"] == pair["p_t"]
        assert same["p_randomisation_holm"] >= same["p_randomisation"]
        assert same["distinct"] is (same["p_randomisation_holm"] < 0.05)
    tsv = cli(*args)
    assert "p_randomisation" in tsv and f"{ranked[0]}\t{ranked[1]}\t1\t" in tsv
    assert "p_randomisation_holm" in tsv and f"{ranked[0]}\t{ranked[-1]}\t" in tsv
    exported = client.get("/c/sample/leaderboard.tsv", params={**BOARD, "significance": 1}).text
    assert exported.count("\tp_randomisation\t") == 2 and exported.count("\tp_randomisation_holm\t") == 1
    assert "significance" not in _board(client)
    for bad in ("5", "abc", "100001"):
        assert (
            client.get("/c/sample/leaderboard.json", params={**BOARD, "significance": 1, "trials": bad}).status_code
            == 400
        )
    assert "--trials" in cli("leaderboard", "sample", "--measure", "cover", "--significance", "--trials", "5", expect=2)


def test_page_ranks_systems_and_shows_the_overall_row_apart(judge: tuple[TestClient, str]) -> None:
    client, _ = judge
    board = _board(client)
    page = client.get("/c/sample/leaderboard", params=BOARD).text
    ranked = page.split('<tbody class="ranked">', 1)[1].split("</tbody>", 1)[0]
    overall = page.split('<tbody class="overall">', 1)[1].split("</tbody>", 1)[0]
    assert OVERALL not in ranked and f'<tr data-system="{OVERALL}">' in overall
    assert "not a system, not ranked" in overall and "any pooled passage covers" in overall
    assert OVERALL not in board["ranks"] and len(board["ranks"]) == len(board["systems"]) - 1
    for name, place in board["ranks"].items():
        row = ranked.split(f'<tr data-system="{name}">', 1)[1].split("</tr>", 1)[0]
        assert f'data-rank="{place["rank"]}"' in row and f'<td class="num">{place["n_queries"]}</td>' in row
        rank_cell = row.split("</td>", 1)[0]
        assert ("=" + str(place["rank"]) in rank_cell) is place["tied"]
    assert 'hx-trigger="sse:grades"' in page and "group" in page and "vs next" in page
    all_pairs = page.split('data-testid="all-pairs"', 1)[1].split("</details>", 1)[0]
    n = len(board["ranks"])
    assert all_pairs.count("<tr data-pair=") == n * (n - 1) // 2 and "Holm" in all_pairs
    live = client.get("/c/sample/leaderboard", params={**BOARD, "overrides": 1, "exclude_flagged": 1}).text
    assert 'hx-trigger="sse:grades, sse:overrides, sse:flags"' in live


def _score(system: str, score: float, queries: int = 3) -> SystemScore:
    return SystemScore(system, score, 0.0, {f"q{i}": score for i in range(queries)})


def test_competition_ranks_tie_at_the_printed_precision() -> None:
    systems = [_score(OVERALL, 0.9), _score("a", 0.5004), _score("b", 0.4996, 2), _score("c", 0.4), _score("d", 0.3)]
    ranks = competition_ranks(Leaderboard("cover", systems))
    assert [(r.system, r.rank, r.tied, r.n_queries) for r in ranks] == [
        ("a", 1, True, 3),  # 0.500 and 0.500 as printed: "=1", "=1", then 3
        ("b", 1, True, 2),
        ("c", 3, False, 3),
        ("d", 4, False, 3),
    ]
