"""The analysis routes only render (issue 11): no science in app/web/routes/, graders by id, one measure menu."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient

from app.cli import app as cli_app
from app.collections.graders import primary_grader
from app.collections.service import get_collection
from app.leaderboards import measures
from app.web.main import create_app
from tests.conftest import Database
from tests.helpers import cli
from tests.test_analyses_cli_web import twin_grader
from tests.web.conftest import login

ROUTES_DIR = Path(__file__).resolve().parents[2] / "app" / "web" / "routes"
# Modules a route may not import: the science lives in the domain packages, which return frozen values.
BANNED = ("scipy", "numpy", "app.evaluation")
# The one exception, kept tiny: rendering a Table as tsv/LaTeX/Markdown is presentation, not computation.
ALLOWED = {"app.evaluation.formatting"}


def _imports(path: Path) -> list[str]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append(node.module)
    return modules


def test_routes_hold_no_science() -> None:
    offending = {
        f"{path.name}: {module}"
        for path in sorted(ROUTES_DIR.glob("*.py"))
        for module in _imports(path)
        if module not in ALLOWED and any(module == b or module.startswith(b + ".") for b in BANNED)
    }
    assert not offending, f"routes import science (move it to a domain package): {sorted(offending)}"


def test_the_rule_sees_a_banned_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import numpy as np\nfrom scipy.stats import kendalltau\nfrom app.evaluation.cover import OVERALL\n"
    )
    assert _imports(probe) == ["numpy", "scipy.stats", "app.evaluation.cover"]


@pytest.fixture
def twins(web_db_any: Database) -> tuple[int, int]:
    """The sample collection graded by the default grader and by a twin of equal model and prompt class."""
    return twin_grader(web_db_any, "sample")


@pytest.fixture
def viewer(twins: tuple[int, int]) -> Iterator[TestClient]:
    with TestClient(create_app()) as client:
        login(client, "viewer")
        yield client


def _shown_grader(html: str) -> int:
    match = re.search(r'data-testid="grader-coverage" data-grader="(\d+)"', html)
    assert match, "page shows no grader coverage"
    return int(match.group(1))


def test_every_analysis_page_answers_for_ambiguous_graders(
    web_db_any: Database, twins: tuple[int, int], viewer: TestClient
) -> None:
    with web_db_any.session() as session:
        primary = primary_grader(session, get_collection(session, "sample"))
        assert primary is not None
    for chosen, expected in ((None, primary.id), (twins[0], twins[0]), (twins[1], twins[1])):
        params = {} if chosen is None else {"grader": chosen}
        for url in ("/c/sample/leaderboard", "/c/sample/agreement"):
            page = viewer.get(url, params=params)
            assert page.status_code == 200, f"{url}: {page.text[:300]}"
            assert _shown_grader(page.text) == expected
        for url in ("/c/sample/leaderboard.json", "/c/sample/agreement.json"):
            response = viewer.get(url, params=params)
            assert response.status_code == 200 and response.json()["grader_id"] == expected
        compare = viewer.get("/c/sample/compare.json", params={"a_grader": chosen} if chosen else {})
        assert compare.status_code == 200 and compare.json()["a"]["grader_id"] == expected
        assert compare.json()["b"]["grader_id"] == primary.id
    page = viewer.get("/c/sample/compare", params={"a_grader": twins[0], "b_grader": twins[1]})
    assert page.status_code == 200
    assert page.text.count('data-testid="grader-coverage"') == 2  # each side's coverage, as on the other pages
    assert re.search(rf'name="a_grader"[^>]*>.*?<option value="{twins[0]}" selected', page.text, re.S)
    assert re.search(rf'name="b_grader"[^>]*>.*?<option value="{twins[1]}" selected', page.text, re.S)


def test_cli_names_both_twins(twins: tuple[int, int]) -> None:
    message = cli("leaderboard", "sample", "--measure", "cover", "--prompt-class", _prompt_class(twins), expect=2)
    assert "2 graders match" in message and f"#{twins[0]} " in message and f"#{twins[1]} " in message


def _prompt_class(twins: tuple[int, int]) -> str:
    from app.db import session_scope
    from app.models import Grader

    with session_scope() as session:
        return session.get_one(Grader, twins[0]).prompt_class


def test_one_measure_registry_drives_menu_help_and_validation(viewer: TestClient) -> None:
    page = viewer.get("/c/sample/leaderboard").text
    menu = page.split('name="measure"', 1)[1].split("</select>", 1)[0]
    assert re.findall(r"<option[^>]*>([^<]+)</option>", menu) == [m.name for m in measures.MENU]
    for command in ("leaderboard", "compare"):
        options = {p.name: p for p in typer.main.get_command(cli_app).commands[command].params}  # type: ignore[attr-defined]
        assert options["measure"].help == measures.HELP
    assert viewer.get("/c/sample/leaderboard", params={"measure": "P@0"}).status_code == 400
    cli("leaderboard", "sample", "--measure", "P@0", expect=2)


def _selected_measure(page: str) -> list[str]:
    menu = page.split('name="measure"', 1)[1].split("</select>", 1)[0]
    return re.findall(r"<option selected>([^<]+)</option>", menu)


def test_the_measure_menu_keeps_the_boards_measure_even_off_the_menu(viewer: TestClient) -> None:
    """A measure the menu does not list (or spelled another way) stays selected, so resubmitting keeps it."""
    off_menu = next(n for n in ("P@5", "nugget-strict-weighted") if n not in [m.name for m in measures.MENU])
    page = viewer.get("/c/sample/leaderboard", params={"measure": off_menu}).text
    assert _selected_measure(page) == [off_menu]
    assert _selected_measure(viewer.get("/c/sample/leaderboard", params={"measure": "p.20"}).text) == ["P@20"]
    assert _selected_measure(viewer.get("/c/sample/leaderboard").text) == [measures.DEFAULT.name]


def test_oversight_tabs_keep_the_grader(twins: tuple[int, int], viewer: TestClient) -> None:
    page = viewer.get("/c/sample/oversight/bad", params={"grader": twins[1]}).text
    tabs = page.split('<nav class="tabs">', 1)[1].split("</nav>", 1)[0]
    assert tabs.count(f"grader={twins[1]}") == 4


def test_leaderboard_names_the_regrade_grader_when_it_differs(twins: tuple[int, int], viewer: TestClient) -> None:
    """The twin (newest, as complete: primary by default) was written by no job: a rubric edit would regrade
    with the job's grader, not with it, and the leaderboard says so; with the job's grader primary, it does not."""
    from app.collections.graders import set_primary_grader
    from app.db import session_scope

    page = viewer.get("/c/sample/leaderboard").text
    assert _shown_grader(page) == twins[1]
    assert 'data-testid="regrade-note"' in page and f"#{twins[1]} " in page
    with session_scope() as session:
        set_primary_grader(session, get_collection(session, "sample"), twins[0])
    page = viewer.get("/c/sample/leaderboard").text
    assert _shown_grader(page) == twins[0] and 'data-testid="regrade-note"' not in page
