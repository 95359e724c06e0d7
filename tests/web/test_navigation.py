"""Navigation: the current page in the collection nav, page titles, the import form after an error, query links."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

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
