"""The PPI leaderboard on the sample collection: plain = the ordinary board exactly, a hand-computed P@2, surfaces."""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.evaluation.cover import OVERALL, cover_scores_of, cover_table
from app.evaluation.frame import GradeFrame, RankingFrame
from app.evaluation.qrels import LabelRule, frame_labels
from app.leaderboards.analysis import leaderboard_analysis
from app.leaderboards.ppi import ppi_board, precision_weights, reliable
from app.leaderboards.service import LeaderboardRequest, evaluation_data, score_systems
from app.models import Collection
from tests.conftest import Database
from tests.helpers import cli
from tests.review.test_ppi_sample import label_scenario
from tests.web.conftest import login
from tests.web.test_browser import CHROMIUM, SHOTS, browser, server  # noqa: F401  the live server and browser
from tests.web.test_browser import Session as BrowserSession


@pytest.mark.parametrize("measure", ["cover", "P@2"])
def test_no_labelled_row_gives_the_plain_board_exactly(web_db_any: Database, measure: str) -> None:
    with web_db_any.session() as session:
        collection = session.scalars(select(Collection)).one()
        request = LeaderboardRequest(measure, min_rating=4, top_k=2)
        result = leaderboard_analysis(session, collection, request, ppi=True)
        data = evaluation_data(session, collection, request)
        p2 = score_systems(data, LeaderboardRequest("P@2", min_rating=4, top_k=2))
        units = np.unique(data.grades.entry)
        systems, weights = precision_weights(data.grades, data.ranking, 2, p2, units)
        labels = frame_labels(data.grades, LabelRule.parse("max", min_rating=4))[1]
    board = result.ppi
    assert board is not None and board.sample.n_rows == 0 and board.k == 2
    assert [s.system for s in board.systems] == [r.system for r in result.ranked]  # the board's order
    scores = {s.system: s.score for s in result.board.systems}
    for s in board.systems:
        assert s.precision is not None
        for e in (s.cover, s.precision):
            assert e.estimate == e.plain and e.ci_low is None and e.n_labels == 0
        assert (s.cover.plain if measure == "cover" else s.precision.plain) == scores[s.system]  # exactly
    # the P@k weights reproduce the board: Σ_u w_su·[label_u ≥ 4] = P@2_s (up to summation order)
    assert weights @ (labels >= 4) == pytest.approx([s.score for s in p2], abs=1e-12)
    assert systems == [s.system for s in p2]


def test_hand_computed_ppi_on_the_judges_sample(web_db_any: Database) -> None:
    with web_db_any.session() as session:
        collection, _ = label_scenario(session)
        request = LeaderboardRequest("P@2", min_rating=4, top_k=2)
        board = ppi_board(session, collection, request)
        data = evaluation_data(session, collection, request)
        with_judges = evaluation_data(session, collection, LeaderboardRequest("P@2", 4, 2, include_overrides=True))
        session.rollback()
    sample = board.sample
    assert (sample.n_rows, sample.population, sample.incomplete) == (4, 24, 1)
    # N = 24 rows, n = 4 labelled: aurora-6 (Y 1, f 0), aurora-4 (1, 1), bread-3 (0, 1), bread-1 (1, 1).
    # P@2 over 3 queries: w_su = 1/6 = a for u in s's top 2. On the sample (in that order):
    #   decent-ranker (top 2 holds bread-3, bread-1): w·Y = (0, 0, 0, a), w·f = (0, 0, a, a)
    #   strong-ranker (bread-1):                      w·Y = w·f = (0, 0, 0, a)
    #   keyword-ranker (aurora-4):                    w·Y = w·f = (0, a, 0, 0)
    #   weak-ranker: none (bread-7 is incomplete)
    # Centred sums Cov, Var: decent a²/2, a²; strong and keyword 3a²/4 each; weak 0. One λ for all:
    # λ̂ = (a²/2 + 3a²/4 + 3a²/4) / (a² + 3a²/4 + 3a²/4) = 0.8.
    precision = {s.system: s.precision for s in board.systems}
    assert [e.tuning for e in precision.values() if e is not None] == [pytest.approx(0.8)] * 4
    # decent: θ̂ = 0.8·1 + 6·(a − 0.8·2a) = 0.2; residuals (0, 0, −0.8a, 0.2a): s² = 0.59a²/3,
    # Var = 24²·(1 − 4/24)/4 · s² = 120 · 0.59/108 = 59/90; the interval clipped to [0, 1].
    decent = precision["decent-ranker"]
    assert decent is not None and decent.plain == 1.0 and decent.support == 2
    assert decent.estimate == pytest.approx(0.2) and decent.stderr == pytest.approx(math.sqrt(59 / 90))
    assert (decent.ci_low, decent.ci_high) == (0.0, 1.0)
    # strong: θ̂ = 0.8 + 6·0.2a = 1.0; keyword: 0.8/3 + 6·0.2a = 7/15; residuals (one 0.2a): s² = a²/100,
    # Var = 120·a²/100 = 1/30. One supporting row each: the interval is there but unreliable.
    for name, value in {"strong-ranker": 1.0, "keyword-ranker": 7 / 15}.items():
        e = precision[name]
        assert e is not None and e.support == 1 and e.no_interval is None and not reliable(e)
        assert e.estimate == pytest.approx(value) and e.stderr == pytest.approx(math.sqrt(1 / 30))
        assert e.ci_low == pytest.approx(value - 1.959964 * math.sqrt(1 / 30), abs=1e-6)
        assert e.ci_high == pytest.approx(min(value + 1.959964 * math.sqrt(1 / 30), 1.0), abs=1e-6)
    # weak: no labelled row in its top 2: the estimate is λ·plain and there is no interval, with the reason
    weak = precision["weak-ranker"]
    assert weak is not None and weak.estimate == 0.0 and weak.stderr is None and weak.ci_low is None
    assert (weak.support, weak.no_interval) == (0, "none: no labelled row in this system's top k")
    # Cover: Δ_su recomputed as the definition says, one labelled row's judges' grades put in at a time
    plain = _cover(data.grades, data.ranking)
    effects = dict.fromkeys(plain, 0.0)
    for row in sample.rows:
        others = data.grades.select(data.grades.entry != row.entry)
        judged = with_judges.grades.select(with_judges.grades.entry == row.entry)
        for name, value in _cover(_concat(others, judged), data.ranking).items():
            effects[name] += value - plain[name]
    for system in board.systems:
        assert system.cover.plain == plain[system.system]
        expected = plain[system.system] + 24 / 4 * effects[system.system]
        assert system.cover.estimate == pytest.approx(min(max(expected, 0.0), 1.0), abs=1e-12)
        assert system.cover.support == (system.precision.support if system.precision else -1)  # both top 2
    assert any(effects.values())  # the case corrects Cover somewhere


def _cover(grades: GradeFrame, ranking: RankingFrame) -> dict[str, float]:
    table = cover_table(grades, ranking, min_rating=4, top_k=2)
    return {s.system: s.score for s in cover_scores_of(table) if s.system != OVERALL}


def _concat(a: GradeFrame, b: GradeFrame) -> GradeFrame:
    columns = {name: np.r_[getattr(a, name), getattr(b, name)] for name in ("entry", "item", "rating", "correct")}
    return replace(a, **columns)


def test_cli_ppi_equals_the_web_and_the_default_json_is_unchanged(web_db: Database, client: TestClient) -> None:
    with web_db.session() as session:
        label_scenario(session)
        session.commit()
    args: tuple[str, ...] = ("leaderboard", "sample", "--measure", "P@2", "--min-rating", "4", "--top-k", "2")
    args += ("--rubric-version", "1")
    args += ("--per-query-correlation", "--min-judgment", "2")  # what the web adds for a trec measure
    plain = cli(*args, "--format", "json")
    with_ppi = json.loads(cli(*args, "--ppi", "--format", "json"))
    assert "ppi" not in json.loads(plain)
    assert plain == json.dumps({k: v for k, v in with_ppi.items() if k != "ppi"}, indent=1) + "\n"
    login(client, "viewer")
    params: dict[str, str | int] = {"measure": "P@2", "min_rating": 4, "top_k": 2, "version": 1}
    assert client.get("/c/sample/leaderboard.json", params={**params, "ppi": 1}).json() == with_ppi
    assert client.get("/c/sample/leaderboard.json", params=params).text + "\n" == plain
    ppi = with_ppi["ppi"]
    assert ppi["sample"] == {
        "rows": 4, "cells": 12, "reached": 5, "incomplete": 1, "population": 24, "judges": ["judge"],
    }  # fmt: skip
    page = client.get("/c/sample/leaderboard", params=params).text
    assert "4 rows (12 cells) from judges&#39; uniform sample, of 24 graded rows; 1 reached rows incomplete" in page
    for s in ppi["systems"]:
        row = page.split(f'<tr data-ppi-system="{s["system"]}">', 1)[1].split("</tr>", 1)[0]
        cells = re.findall(r'<td class="num[^"]*"[^>]*>([^<]*)', row)
        p = s["precision"]
        assert cells[:2] == [f"{s['cover']['plain']:.3f}", f"{s['cover']['ppi']:.3f}"]
        assert cells[4:6] == [f"{p['plain']:.3f}", f"{p['ppi']:.3f}"]
        assert cells[7] == f"{p['support']} of 4" and p["labelled"] == 4
        if p["ci_low"] is None:
            assert html.escape(p["interval"]).replace("&#x27;", "&#39;") in row
        else:
            assert f"[{p['ci_low']:.3f}, {p['ci_high']:.3f}]" in row
            assert ("unreliable" in row) == (not p["reliable"])
    weak = next(s["precision"] for s in ppi["systems"] if s["system"] == "weak-ranker")
    assert (weak["support"], weak["reliable"]) == (0, False)
    assert weak["interval"] == "none: no labelled row in this system's top k"
    tsv = cli(*args, "--ppi")
    assert "\tcover_ppi\t" in tsv and "# 4 rows (12 cells)" in tsv


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium package is not installed")
def test_the_ppi_section_in_a_browser_says_which_intervals_to_distrust(
    web_db: Database,
    server: str,  # noqa: F811
    browser: object,  # noqa: F811
) -> None:
    with web_db.session() as session:
        label_scenario(session)
        session.commit()
    viewer = BrowserSession(browser, server, "viewer")
    viewer.visit("/c/sample/leaderboard?measure=P@2&min_rating=4&top_k=2&version=1")
    viewer.page.click("[data-testid=ppi] > summary")
    viewer.page.screenshot(path=str(_shots() / "leaderboard-ppi.png"), full_page=True)
    section = viewer.page.locator("[data-testid=ppi-table]")
    weak = section.locator('tr[data-ppi-system="weak-ranker"]').inner_text()
    strong = section.locator('tr[data-ppi-system="strong-ranker"]').inner_text()
    assert "none: no labelled row in this system's top k" in weak and "0 of 4" in weak
    assert "unreliable" in strong and "1 of 4" in strong  # in words, not only a colour
    assert "λ = 0.80" in viewer.page.locator("[data-testid=ppi]").inner_text()
    assert viewer.errors == []
    viewer.close()


def _shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
