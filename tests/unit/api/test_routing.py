"""How a route runs (``api/routing.py``): a plain ``def`` endpoint in one hop to a worker
thread, except a ``@quick_read`` one on an app whose store is SQLite, which runs on the
loop; the choice is the app's (``Edge(loop_reads=...)``), per request."""

from __future__ import annotations

import threading

from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from gpudock.api.edge import Edge
from gpudock.api.routing import OneHop, quick_read


def app(loop_reads: bool) -> FastAPI:
    """Two endpoints that say which thread ran them, and the loop's thread."""
    router = APIRouter(route_class=OneHop)

    @router.get("/quick")
    @quick_read
    def quick() -> dict[str, int]:
        return {"thread": threading.get_ident()}

    @router.get("/plain")
    def plain() -> dict[str, int]:
        return {"thread": threading.get_ident()}

    @router.get("/loop")
    async def loop() -> dict[str, int]:
        return {"thread": threading.get_ident()}

    made = FastAPI()
    made.include_router(router)
    made.add_middleware(Edge, max_bytes=1024, loop_reads=loop_reads)
    return made


def threads(loop_reads: bool) -> dict[str, int]:
    with TestClient(app(loop_reads)) as client:
        return {
            path: client.get(f"/{path}").json()["thread"] for path in ("quick", "plain", "loop")
        }


def test_on_sqlite_a_quick_read_runs_on_the_loop_and_any_other_endpoint_in_a_thread() -> None:
    ran = threads(loop_reads=True)
    assert ran["quick"] == ran["loop"]
    assert ran["plain"] != ran["loop"]


def test_elsewhere_a_quick_read_keeps_its_hop() -> None:
    ran = threads(loop_reads=False)
    assert ran["quick"] != ran["loop"]
    assert ran["plain"] != ran["loop"]


def test_the_choice_is_each_apps_own() -> None:
    """Two apps in one process (a test's SQLite and PostgreSQL servers): neither's
    setting leaks into the other's requests."""
    sqlite, postgres = app(loop_reads=True), app(loop_reads=False)
    with TestClient(sqlite) as on_sqlite, TestClient(postgres) as on_postgres:
        for _ in range(3):
            quick = on_sqlite.get("/quick").json()["thread"]
            assert quick == on_sqlite.get("/loop").json()["thread"]
            quick = on_postgres.get("/quick").json()["thread"]
            assert quick != on_postgres.get("/loop").json()["thread"]
