"""The dashboard's server side: cookie login, the CSRF guard, the cluster JSON, static files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.kit.cluster import fill

from gpudock.api.app import create_app
from gpudock.config import ServerConfig
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.runtime.context import RuntimeContext
from gpudock.services.dashboard import DashboardService
from gpudock.store import tokens
from gpudock.store.db import Database
from gpudock.store.models import GpuRow
from gpudock.store.tokens import Principal

UI = {"X-Gpudock-UI": "1"}


@pytest.fixture
def ctx(db_url: str, tmp_path: Path) -> Iterator[RuntimeContext]:
    db = Database.open(db_url)
    fill(db, nodes=2, gpus_per_node=4, jobs=20)  # 2 exclusive + 4 shares a node; 4 wait
    context = RuntimeContext(
        db=db,
        executor=None,  # type: ignore[arg-type]  # these routes never touch the executor
        config=ServerConfig(),
        node_name="node-000",
        instance_id="test",
        log_dir=tmp_path,
    )
    yield context
    db.close()


def token(ctx: RuntimeContext, user: str, admin: bool = False) -> str:
    with ctx.db.write() as session:
        return tokens.create_token(session, user, admin, 0.0)


def logged_in(ctx: RuntimeContext, user: str, admin: bool = False) -> TestClient:
    client = TestClient(create_app(ctx))
    response = client.post("/ui/login", json={"token": token(ctx, user, admin)}, headers=UI)
    assert response.status_code == 200, response.text
    assert response.json() == {"user": user, "admin": admin}
    return client


def test_login_keeps_the_token_in_an_httponly_strict_cookie_and_logout_drops_it(
    ctx: RuntimeContext,
) -> None:
    client = TestClient(create_app(ctx))
    secret = token(ctx, "user1")
    response = client.post("/ui/login", json={"token": secret}, headers=UI)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"gpudock_token={secret};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    assert client.get("/ui/api/me").json() == {"user": "user1", "admin": False}
    assert {j["user"] for j in client.get("/v1/jobs").json()} == {"user1"}

    assert client.post("/ui/logout", headers=UI).status_code == 204
    response = client.get("/ui/api/me")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == (
        "missing Authorization header; send 'Authorization: Bearer <token>'"
    )


def test_a_bad_or_cross_site_login_is_refused(ctx: RuntimeContext) -> None:
    client = TestClient(create_app(ctx))
    response = client.post("/ui/login", json={"token": "gpd_nope"}, headers=UI)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "invalid token"
    assert "set-cookie" not in response.headers
    response = client.post("/ui/login", json={"token": token(ctx, "user1")})
    assert response.status_code == 403 and "cross-site" in response.json()["error"]["message"]
    response = client.post("/ui/login", json={"token": ""}, headers=UI)
    assert response.status_code == 422


def test_cookie_changes_need_the_ui_header_and_this_servers_origin(ctx: RuntimeContext) -> None:
    client = logged_in(ctx, "admin", admin=True)
    pending = next(j["id"] for j in client.get("/v1/jobs?state=PENDING").json())
    response = client.post(f"/v1/jobs/{pending}/cancel")
    assert response.status_code == 403
    assert response.json()["error"]["message"].startswith("cross-site request refused")
    response = client.post(
        f"/v1/jobs/{pending}/cancel", headers={**UI, "Origin": "https://evil.example"}
    )
    assert response.status_code == 403
    assert "origin 'https://evil.example' is not this server" in response.text
    response = client.post(
        f"/v1/jobs/{pending}/cancel", headers={**UI, "Origin": "http://testserver"}
    )
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"


def test_a_bearer_token_wins_over_the_cookie_and_needs_no_ui_header(ctx: RuntimeContext) -> None:
    client = logged_in(ctx, "user1")
    other = token(ctx, "user5")  # fill() gives user5 a pending job
    jobs = client.get("/v1/jobs", headers={"Authorization": f"Bearer {other}"}).json()
    assert {j["user"] for j in jobs} == {"user5"}
    pending = next(j["id"] for j in jobs if j["state"] == "PENDING")
    response = client.post(
        f"/v1/jobs/{pending}/cancel", headers={"Authorization": f"Bearer {other}"}
    )
    assert response.status_code == 200
    response = client.get("/v1/jobs", headers={"Authorization": "Bearer gpd_wrong"})
    assert response.json()["error"]["message"] == "invalid token"


def test_the_cluster_shows_every_gpu_and_job_ids_only_to_their_owner_or_an_admin(
    ctx: RuntimeContext,
) -> None:
    admin = DashboardService(ctx).cluster(Principal("admin", True))
    gpus = [g for n in admin["nodes"] for g in n["gpus"]]
    assert [n["name"] for n in admin["nodes"]] == ["node-000", "node-001"]
    assert len(gpus) == 8 and all(g["emulated"] and g["utilization"] is None for g in gpus)
    whole = [g for g in gpus if g["allocation"] == 1.0]
    shared = [g for g in gpus if len(g["holders"]) == 2]
    assert len(whole) == 4 and len(shared) == 4
    assert all(0 < g["allocation"] < 1 and g["holders"][0]["memory"] for g in shared)
    assert all(h["job"] is not None for g in gpus for h in g["holders"])

    mine = DashboardService(ctx).cluster(Principal("user1", False))
    holders = [h for n in mine["nodes"] for g in n["gpus"] for h in g["holders"]]
    assert {h["user"] for h in holders if h["job"] is not None} == {"user1"}
    assert any(h["job"] is None and h["user"] != "user1" for h in holders)


def test_real_gpus_on_this_node_get_nvml_readings(ctx: RuntimeContext) -> None:
    with ctx.db.write() as session:
        row = session.query(GpuRow).filter_by(node="node-000", index=0).one()
        row.emulated, uuid = False, row.uuid
    reading = GpuTelemetry(utilization=0.42, memory_used=7 * 1024**3)
    data = DashboardService(ctx, telemetry=lambda: {uuid: reading}).cluster(Principal("a", True))
    gpu = data["nodes"][0]["gpus"][0]
    assert (gpu["utilization"], gpu["memory_used"]) == (0.42, 7 * 1024**3)


def test_the_page_and_its_files_are_served_from_the_package(ctx: RuntimeContext) -> None:
    client = TestClient(create_app(ctx))
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "://" not in page.text, "the page links out"
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        response = client.get(f"/ui/static/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert "://" not in response.text.replace("http://www.w3.org", ""), f"{name} links out"
    response = client.get("/ui/static/..%2Fapp.py")
    assert response.status_code == 404
    assert "/ui/" not in client.get("/openapi.json").text
