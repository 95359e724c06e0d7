"""Hostile values on every route: never a 5xx, and a refusal leaves the database as it was.

For each route of the role table (``ROUTES`` in test_http.py) and each of its path, query and
form parameters, one request per hostile value (huge, negative and zero numbers, NaN/inf, path
tricks, NUL, 100k characters, unicode; hostile files where a route takes uploads), signed in as
an organizer. The database is built once per backend (SQLite and PostgreSQL) for the module:
the sample collection, graded by the default grader, and one user per role, as ``web_db`` does.
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import params as fastapi_params
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session

from app.accounts.service import create_user
from app.config import get_settings
from app.db import session_scope
from app.models import BankItem, Base, Job
from app.web.main import create_app
from tests.conftest import (
    Database,
    PostgresServer,
    _postgres_database,
    _sqlite_copy,
    _use_database,
)
from tests.grading.conftest import import_sample
from tests.jobs.helpers import launch, wait_job
from tests.web.conftest import PASSWORDS, csrf_of, login
from tests.web.test_http import ROUTES, VALUES

HUGE = str(10**23)
LONG = "x" * 100_000
URL_LONG = "x" * 60_000  # the client refuses a URL component past 64 KiB
UNICODE = "名前\u202e😀\ufeff"
# Values for a numeric parameter, and for a text parameter (a few of the other kind each).
NUMBERS = {"huge": HUGE, "neg-huge": "-" + HUGE, "neg": "-1", "zero": "0", "nan": "nan", "nul": "\x00", "long": LONG}
TEXTS = {"dotdot": "../..", "slash": "/", "question": "?", "pct00": "%00", "nul": "\x00", "long": LONG}
TEXTS |= {"unicode": UNICODE, "huge": HUGE}
NUMERIC_DYNAMIC = {"version", "grader", "min_rating", "min_judgment", "top_k", "a_version", "b_version"}
NUMERIC_DYNAMIC |= {"a_grader", "b_grader", "trials"}
# Parameters a route reads from request.query_params itself (no declaration FastAPI could list).
DYNAMIC_QUERY = {
    "/c/{name}/leaderboard": (
        "measure",
        "label",
        "version",
        "grader",
        "min_rating",
        "min_judgment",
        "top_k",
        "overrides",
        "exclude_flagged",
        "significance",
        "trials",
    ),
    "/c/{name}/leaderboard.{fmt}": (
        "measure",
        "label",
        "version",
        "grader",
        "min_rating",
        "top_k",
        "overrides",
        "exclude_flagged",
        "significance",
        "trials",
        "ppi",
    ),
    "/c/{name}/qrels": ("label", "version", "grader", "min_rating"),
    "/c/{name}/compare": ("a_version", "b_version", "a_grader", "b_grader", "measure"),
    "/c/{name}/compare.json": ("a_version", "b_version", "a_grader", "b_grader", "measure"),
}
DYNAMIC_FORM = {"/c/{name}/drafts/{number}/accept": ("item_id",)}
SIGN_IN_ROUTES = ("/login", "/logout", "/account/password")
# Sign-in bookkeeping (sessions, throttling) changes on a refused sign-in by design.
NOT_USER_DATA = {"auth_session", "login_throttle"}
MEASURE_EXTRA = {"ndcg-huge": "NDCG@99999999999999999999", "p-zero": "P@0", "irm": "P(rel=99999999999)@5"}
LABEL_EXTRA = {"bogus": "bogus", "ma-huge": "min-answers:99999999999999999999", "ma-zero": "min-answers:0"}


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    param: str  # "path:x", "query:x", "form:x" or "file:kind"
    value: Any
    label: str

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.param}"


def _routes_by_key() -> dict[tuple[str, str], APIRoute]:
    routes: dict[tuple[str, str], APIRoute] = {}
    for route in create_app().routes:
        nested = getattr(route, "original_router", None)
        for r in nested.routes if nested else [route]:
            if isinstance(r, APIRoute):
                routes.update({(m, r.path): r for m in r.methods})
    return routes


def _all(dependant: Dependant, kind: str) -> list[Any]:
    found = list(getattr(dependant, kind))
    for sub in dependant.dependencies:
        found += _all(sub, kind)
    return found


def _declared(route: APIRoute) -> tuple[list[str], list[str], list[str], set[str]]:
    """(path, query, form) parameter names of the route and its dependencies (uploads as ``file:name``),
    and the names of the numeric ones."""
    body = _all(route.dependant, "body_params")
    forms = [f"file:{p.name}" if isinstance(p.field_info, fastapi_params.File) else p.name for p in body]
    fields = _all(route.dependant, "path_params") + _all(route.dependant, "query_params") + body
    numeric = {p.name for p in fields if "int" in str(p.field_info.annotation)}
    paths = list(dict.fromkeys(p.name for p in _all(route.dependant, "path_params")))
    queries = list(dict.fromkeys(p.name for p in _all(route.dependant, "query_params")))
    return paths, queries, list(dict.fromkeys(forms)), numeric


def _values_for(name: str, numeric: bool) -> dict[str, str]:
    if name == "measure":
        return {**TEXTS, **MEASURE_EXTRA}
    if name == "label":
        return {**TEXTS, **LABEL_EXTRA}
    return NUMBERS if numeric else TEXTS


def _hostile_files() -> dict[str, tuple[str, bytes]]:
    """Upload kind → (file name, content) that the importers must refuse with a located error."""
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    return {
        "passages-deep": ("deep.jsonl", deep),
        "passages-nan": ("nan.jsonl", b'["bees", [{"paragraph_id": "p", "text": "t", "paragraph": NaN}]]\n'),
        "passages-nul": ("nul.jsonl", b'["bees", [{"paragraph_id": "p", "text": "a\\u0000b"}]]\n'),
        "passages-longid": ("long.jsonl", f'["bees", [{{"paragraph_id": "{"p" * 301}", "text": "t"}}]]\n'.encode()),
        "passages-rank": (
            "rank.jsonl",
            b'["bees", [{"paragraph_id": "p", "text": "t", "paragraph_data": {"rankings": '
            b'[{"method": "m", "rank": 99999999999999999999999, "score": 1}]}}]]\n',
        ),
        "runs-nan": ("nan.run", b"bees Q0 p1 1 nan tag\n"),
        "runs-huge": ("huge.run", f"bees Q0 p1 {HUGE} 1.0 tag\n".encode()),
        "runs-longdoc": ("long.run", f"bees Q0 {'d' * 301} 1 1.0 tag\n".encode()),
        "qrels-huge": ("huge.qrels", f"bees 0 p1 {HUGE}\n".encode()),
        "qrels-nul": ("nul.qrels", b"bees 0 p\x001 1\n"),
        "official-inf": ("inf.json", b'{"sys": Infinity}'),
        "official-deep": ("deep.json", b'{"a": ' + b"[" * 50 + b"]" * 50 + b"}"),
        "queries-deep": ("deep.json", b"[" * 100_000),
        "queries-huge-int": ("int.json", b'{"q": ' + b"9" * 5000 + b"}"),
        "bank-deep": ("deep.jsonl", deep),
        "responses-nan": ("r.jsonl", b'{"run_id": "s", "topic_id": "bees", "answer": NaN}\n'),
        "passages-gzip-nul": ("nul.jsonl.gz", gzip.compress(b'["bees", [{"paragraph_id": "p\x00", "text": "t"}]]\n')),
        "passages-name-dotdot": ("..", b"[]\n"),
        "passages-name-slash": ("/", b"[]\n"),
    }


def _cases() -> Iterator[Any]:
    routes = _routes_by_key()
    files = _hostile_files()
    for method, path, _least, _data in ROUTES:
        route = routes[(method, path)]
        path_params, query_params, form_params, numeric = _declared(route)
        numeric |= NUMERIC_DYNAMIC
        query_params += [q for q in DYNAMIC_QUERY.get(path, ()) if q not in query_params]
        form_params += list(DYNAMIC_FORM.get(path, ()))
        params = [f"path:{p}" for p in path_params] + [f"query:{q}" for q in query_params]
        if not path.endswith("/events"):  # a stream answers once its name resolves: only the path is probed
            params += [p if p.startswith("file:") else f"form:{p}" for p in form_params]
        for param in params:
            if param.startswith("file:"):
                kind = param.split(":")[1]
                chosen = {k: v for k, v in files.items() if k.startswith(kind + "-")}
                for label, value in chosen.items():
                    yield pytest.param(Case(method, path, param, value, label), id=f"{method} {path} {param}={label}")
                continue
            name = param.split(":")[1]
            for label, value in _values_for(name, name in numeric).items():
                yield pytest.param(Case(method, path, param, value, label), id=f"{method} {path} {param}={label}")


CASES = list(_cases())
# PostgreSQL differs from SQLite in what it stores (NUL, lengths, 32-bit integers): those values and
# every hostile file run there too; the rest of the matrix runs on SQLite only, to bound the runtime.
POSTGRES_LABELS = {"nul", "long", "huge", "neg-huge", "unicode"}
POSTGRES_CASES = [c for c in CASES if c.values[0].label in POSTGRES_LABELS or c.values[0].param.startswith("file:")]


# -- the database, once per backend for this module ---------------------------------------------


@dataclass
class Served:
    db: Database
    client: TestClient
    token: str
    item_id: str


@pytest.fixture(scope="module")
def served_sqlite(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Served]:
    tmp_path = tmp_path_factory.mktemp("hostile-sqlite")
    yield from _serve(_sqlite_copy(tmp_path, sqlite_template), "sqlite", tmp_path)


@pytest.fixture(scope="module")
def served_postgresql(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer | None, postgres_template: str | None
) -> Iterator[Served]:
    if postgres_server is None or postgres_template is None:
        pytest.skip("PostgreSQL server binaries not installed (set RUBRIC_REQUIRE_POSTGRES=1 to make this fail)")
    url = _postgres_database(postgres_server, postgres_template)
    yield from _serve(url, "postgresql", tmp_path_factory.mktemp("hostile-postgresql"))


def _serve(url: str, backend: str, tmp_path: Path) -> Iterator[Served]:
    """The ``web_db`` steps on one backend: sample imported, graded by the default grader, three users."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("RUBRIC_REDIS_URL", raising=False)
        databases = _use_database(url, backend, monkeypatch)
        db = next(databases)
        import_sample(tmp_path)
        wait_job(db, launch(db))
        with session_scope() as session:
            for role, password in PASSWORDS.items():
                create_user(session, role, role, password)
            item_id = session.scalars(select(BankItem.item_id)).first() or ""
        with TestClient(create_app()) as client:
            yield Served(db, client, login(client, "organizer"), item_id)
        databases.close()
    get_settings.cache_clear()


def fingerprint(session: Session) -> dict[str, tuple[int, Any]]:
    """Per table: (row count, highest primary key) — any insert or delete changes it."""
    result: dict[str, tuple[int, Any]] = {}
    for table in Base.metadata.sorted_tables:
        if table.name in NOT_USER_DATA:
            continue
        keys = list(table.primary_key.columns)
        highest = session.scalar(select(func.max(keys[0]))) if len(keys) == 1 else None
        result[table.name] = (session.scalar(select(func.count()).select_from(table)) or 0, highest)
    return result


def _settle(db: Database, limit_s: float = 60.0) -> None:
    """Wait until no job is queued or running (an accepted request may have launched one)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with db.session() as session:
            if not session.scalar(select(func.count()).where(Job.state.in_(("queued", "running")))):
                return
        time.sleep(0.1)


def _request(served: Served, case: Case) -> Any:
    values = {**VALUES}
    kind, _, name = case.param.partition(":")
    value = URL_LONG if case.value is LONG and kind in ("path", "query") else case.value
    if kind == "path":
        values[name] = quote(str(value), safe="")
    url = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], case.path)
    form = {k: (served.item_id if v == "ITEM" else v) for k, v in _base_form(case).items()}
    params: dict[str, str] = {}
    files: list[tuple[str, tuple[str, bytes]]] = []
    if kind == "query":
        params[name] = str(value)
    elif kind == "form":
        form[name] = str(case.value)
    elif kind == "file":
        files.append((name, case.value))
    client, token = served.client, served.token
    if case.path in SIGN_IN_ROUTES:  # a fresh client: the organizer's session and password stay as they are
        with TestClient(create_app()) as fresh:
            token = login(fresh, "viewer") if case.path == "/account/password" else csrf_of(fresh.get("/login").text)
            if case.path == "/login":
                form.setdefault("csrf_token", token)
            return fresh.request(
                case.method, url, params=params, data=form, headers={"X-CSRF-Token": token}, follow_redirects=False
            )
    return client.request(
        case.method,
        url,
        params=params or None,
        data=form or None,
        files=files or None,
        headers={"X-CSRF-Token": token},
        follow_redirects=False,
    )


def _base_form(case: Case) -> dict[str, str]:
    return next(dict(data) for method, path, _, data in ROUTES if (method, path) == (case.method, case.path))


@pytest.mark.parametrize("case", CASES)
def test_hostile_value_on_sqlite(served_sqlite: Served, case: Case) -> None:
    _check(served_sqlite, case)


@pytest.mark.postgres
@pytest.mark.parametrize("case", POSTGRES_CASES)
def test_hostile_value_on_postgresql(served_postgresql: Served, case: Case) -> None:
    _check(served_postgresql, case)


def _check(served: Served, case: Case) -> None:
    """No 5xx; and a refusal (4xx) leaves every table's rows as they were."""
    _settle(served.db)
    with served.db.session() as session:
        before = fingerprint(session)
    response = _request(served, case)
    assert response.status_code < 500, f"{case}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400:
        _settle(served.db)
        with served.db.session() as session:
            assert fingerprint(session) == before, f"{case}: refused with {response.status_code} but wrote rows"


def test_every_table_is_in_the_fingerprint(served_sqlite: Served) -> None:
    with served_sqlite.db.session() as session:
        tables = set(inspect(session.get_bind()).get_table_names())
    assert {t.name for t in Base.metadata.sorted_tables} - NOT_USER_DATA <= tables
