"""Navigation: the current page in the collection nav, page titles, the import form after an error, query links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.models import Passage
from app.web.main import create_app
from tests.conftest import Database
from tests.web.conftest import login

Q = "bees"
SUFFIX = " · sample · Rubric Workbench"

# path → (the nav link marked current, or None, the page's <title>)
PAGES = {
    "/": (None, "Collections · Rubric Workbench"),
    "/c/sample": ("overview", "Overview" + SUFFIX),
    f"/c/sample/rubric/{Q}": (None, f"Rubric {Q}" + SUFFIX),
    f"/c/sample/grid/{Q}": (None, f"Grid {Q}" + SUFFIX),
    "/c/sample/leaderboard": ("leaderboard", "Leaderboard" + SUFFIX),
    "/c/sample/compare": ("leaderboard", "Compare" + SUFFIX),
    "/c/sample/agreement": ("agreement", "Agreement" + SUFFIX),
    "/c/sample/oversight/bad": ("oversight", "Oversight" + SUFFIX),
    "/c/sample/oversight/verify": ("oversight", "Oversight" + SUFFIX),
    "/c/sample/review": ("review", "Review queue" + SUFFIX),
    "/c/sample/jobs": ("jobs", "Jobs" + SUFFIX),
    "/jobs/1": ("jobs", "Job #1" + SUFFIX),
    "/c/sample/history": ("history", "History" + SUFFIX),
    "/account": (None, "Account · Rubric Workbench"),
    "/users": (None, "Users · Rubric Workbench"),
}
CURRENT = re.compile(r'<a href="[^"]*" aria-current="page" class="current">([^<]+)</a>')


def _nav(html: str) -> str:
    return html.split('class="collection-nav"', 1)[1].split("</nav>", 1)[0] if "collection-nav" in html else ""


def test_every_page_is_titled_and_highlighted_in_the_nav(client: TestClient) -> None:
    login(client, "organizer")
    for path, (current, title) in PAGES.items():
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        html = response.text
        assert re.search(r"<title>(.*?)</title>", html, re.S).group(1) == title, path  # type: ignore[union-attr]
        assert CURRENT.findall(_nav(html)) == ([current] if current else []), path
        if "sample" in title:  # the collection's name in the header, linking to its overview
            assert '<a class="collection-name" href="/c/sample"' in html, path
    who = client.get("/users").text.split('class="who"', 1)[1]
    assert CURRENT.findall(who) == ["users"]
    missing = client.get("/c/no-such-collection")
    assert missing.status_code == 404 and "<title>Error 404 · Rubric Workbench</title>" in missing.text


def test_a_refused_import_keeps_the_name_and_names_the_files_to_choose_again(
    client: TestClient, tmp_path: Path
) -> None:
    token = login(client, "organizer")
    bad = tmp_path / "runs.txt"
    bad.write_text("bees Q0 bees-1 1 2.0 newrun\nbees Q0 bees-2 two 1.0 newrun\n")
    qrels = tmp_path / "dev.qrels"
    qrels.write_text("bees 0 bees-1 2\n")
    with bad.open("rb") as runs, qrels.open("rb") as judged:
        response = client.post(
            "/collections/import",
            data={"name": "sample"},
            files=[("runs", ("runs.txt", runs)), ("qrels", ("dev.qrels", judged))],
            headers={"X-CSRF-Token": token},
        )
    assert response.status_code == 400
    form = response.text.split('id="import"', 1)[1].split("</form>", 1)[0]
    error = form.split('data-testid="import-error"', 1)[1].split("</div>", 1)[0]
    assert "runs.txt" in error and "line 2" in error  # next to the form, before its fields
    assert form.index("import-error") < form.index('name="name"')
    assert 'name="name" required maxlength="200" value="sample"' in form
    rechoose = form.split('data-testid="rechoose"', 1)[1].split("</p>", 1)[0]
    assert "<b>Run files</b> (runs.txt)" in rechoose and "<b>Qrels</b> (dev.qrels)" in rechoose
    assert "Passages" not in rechoose
    # a refused name is the same kind of refusal: the form again, with the error on it and the name as typed
    named = client.post("/collections/import", data={"name": 'fresh "one"'}, headers={"X-CSRF-Token": token})
    form = named.text.split('id="import"', 1)[1]
    assert named.status_code == 400 and "is not allowed" in form and 'value="fresh &#34;one&#34;"' in form
    assert 'data-testid="rechoose"' not in form
    nameless = client.post("/collections/import", data={"name": "  "}, headers={"X-CSRF-Token": token})
    assert nameless.status_code == 400 and "a collection needs a name" in nameless.text.split('id="import"', 1)[1]


def test_the_overview_links_every_query_to_its_rubric_grid_and_review_queue(client: TestClient) -> None:
    login(client, "viewer")
    html = client.get("/c/sample").text
    rows = html.split('data-testid="queries"', 1)[1].split("</table>", 1)[0].split("<tr data-query=")[1:]
    assert len(rows) == 3
    for row in rows:
        query = row.split('"', 2)[1]
        assert f'href="/c/sample/rubric/{query}"' in row and f'href="/c/sample/grid/{query}"' in row
        assert f'href="/c/sample/review?query={query}"' in row


FLAG_CELL = re.compile(r'<td class="flag-cell[^"]*" data-flag-item="([^"]+)".*?</td>', re.S)
SHOWN_FORM = re.compile(r'data-flag-form="(flag|unflag)"(?! hidden)>')


@pytest.fixture
def any_client(web_db_any: Database) -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def test_verify_rows_offer_flag_or_unflag_by_the_flag_state(any_client: TestClient) -> None:
    token = login(any_client, "judge")
    html = any_client.get("/c/sample/oversight/verify").text
    flagged = FLAG_CELL.search(html)
    assert flagged is not None
    item = flagged.group(1)
    answer = any_client.post("/c/sample/flag", data={"item_id": item}, headers={"X-CSRF-Token": token})
    assert answer.status_code == 200 and answer.json()["flagged"] is True
    cells = [(m.group(1), m.group(0)) for m in FLAG_CELL.finditer(any_client.get("/c/sample/oversight/verify").text)]
    assert {cell_item for cell_item, _ in cells} - {item}, "the page shows unflagged items too"
    for cell_item, cell in cells:  # exactly one button shows: the one that changes the state
        assert SHOWN_FORM.findall(cell) == ["unflag" if cell_item == item else "flag"], cell
        assert ("⚑ flagged by you" in cell) == (cell_item == item)


def test_uncovered_headers_read_as_words_and_long_passages_are_clamped(
    any_client: TestClient, web_db_any: Database
) -> None:
    login(any_client, "viewer")
    path = "/c/sample/oversight/uncovered?min_rating=1&min_judgment=0"
    html = any_client.get(path).text
    head = html.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert re.findall(r"<th[^>]*>([^<]+)</th>", head) == [
        "query",
        "passage",
        "worst judgment",
        "best grade",
        "passage text",
        "actions",
    ]
    assert 'class="clamp"' not in html and "data-expand-text" not in html  # short texts stay whole
    passage = re.search(r"<tbody>\s*<tr>\s*<td>[^<]*</td><td>([^<]+)</td>", html)
    assert passage is not None
    long_text = "a passage with many words " * 40
    with web_db_any.session() as session:
        session.execute(update(Passage).where(Passage.passage_id == passage.group(1)).values(text=long_text))
        session.commit()
    html = any_client.get(path).text
    row = html.split(f"<td>{passage.group(1)}</td>", 1)[1].split("</tr>", 1)[0]
    assert f'<td class="clamp">{long_text}</td>' in row  # whole in the page, 3 lines on screen
    assert '<label class="expand-text"><input type="checkbox" data-expand-text> whole text</label>' in row
