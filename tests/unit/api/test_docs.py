"""The API's own description: offline doc pages, and a bearer scheme on every /v1 call."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.api.docs import POLICY
from gpudock.config import ServerConfig
from gpudock.runtime.context import RuntimeContext
from gpudock.store import tokens as token_store
from gpudock.store.db import Database


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    db = Database.open(f"sqlite:///{tmp_path / 'gpudock.db'}")
    ctx = RuntimeContext(
        db=db,
        executor=None,  # type: ignore[arg-type]  # no request here reaches the executor
        config=ServerConfig(),
        node_name="node-000",
        instance_id="test",
        log_dir=tmp_path,
    )
    yield TestClient(create_app(ctx))
    db.close()


def token(client: TestClient, user: str = "alice") -> str:
    ctx: RuntimeContext = client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.write() as session:
        return token_store.create_token(session, user, False, 0.0)


def test_every_v1_operation_asks_for_the_bearer_scheme_and_nothing_else_does(
    client: TestClient,
) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] | {"description": ""} == {
        "type": "http",
        "scheme": "bearer",
        "description": "",
    }
    operations = [
        (path, method, op) for path, ops in spec["paths"].items() for method, op in ops.items()
    ]
    assert {p for p, _, _ in operations if p.startswith("/v1/")} >= {"/v1/jobs", "/v1/tokens"}
    for path, method, op in operations:
        expected = [{"bearer": []}] if path.startswith("/v1/") else None
        assert op.get("security") == expected, f"{method.upper()} {path}"
        # The token travels through the scheme, not as a header parameter to fill in.
        headers = [p["name"].lower() for p in op.get("parameters", []) if p["in"] == "header"]
        assert "authorization" not in headers, f"{method.upper()} {path}"


def test_every_operation_documents_the_errors_any_route_can_give(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    error = {"$ref": "#/components/schemas/ErrorOut"}
    assert "ErrorOut" in spec["components"]["schemas"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            responses = op["responses"]
            assert "503" in responses, where  # a database outage
            if op.get("security"):
                assert responses["401"]["content"]["application/json"]["schema"] == error, where
            if "requestBody" in op:
                assert responses["413"]["content"]["application/json"]["schema"] == error, where
    # a route's own answer for one of these statuses is kept, not overwritten
    healthz = spec["paths"]["/healthz"]["get"]["responses"]["503"]
    assert healthz["content"]["application/json"]["schema"] != error


def test_what_the_documented_errors_say_is_what_the_server_sends(client: TestClient) -> None:
    unauthorized = client.post("/v1/tokens", json={"user": "bob"})
    too_large = client.post(
        "/v1/jobs",
        content=b"x" * (client.app.state.ctx.config.api.max_body_bytes + 1),  # type: ignore[attr-defined]
        headers={"Authorization": f"Bearer {token(client)}", "Content-Type": "application/json"},
    )

    assert unauthorized.status_code == 401
    assert unauthorized.json()["error"]["code"] == "Unauthorized"
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "PayloadTooLarge"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing Authorization header; send 'Authorization: Bearer <token>'"),
        ({"Authorization": "Basic YWxpY2U6eA=="}, "Authorization header must be 'Bearer <token>'"),
        ({"Authorization": "Bearer "}, "Authorization header must be 'Bearer <token>'"),
        ({"Authorization": "Bearer gpd_nope"}, "invalid token"),
    ],
)
def test_a_v1_call_without_a_valid_token_gets_the_same_401(
    client: TestClient, headers: dict[str, str], message: str
) -> None:
    response = client.get("/v1/jobs", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "Unauthorized", "message": message, "field": None}}


def test_a_valid_bearer_token_in_any_letter_case_is_accepted(client: TestClient) -> None:
    assert client.get("/v1/jobs", headers={"Authorization": f"bearer {token(client)}"}).json() == []


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_doc_pages_load_only_from_the_server_and_need_no_token(
    client: TestClient, page: str
) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == POLICY
    assert "connect-src 'self'" in POLICY and "img-src 'self' data:" in POLICY
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.text)
    assert any(url.endswith(".js") for url in assets), response.text
    for url in assets:
        assert url.startswith("/"), f"{page} loads {url} from elsewhere"
        asset = client.get(url)
        assert asset.status_code == 200 and asset.content, url
        assert "content-security-policy" not in asset.headers  # the pages only
    assert client.get("/openapi.json").status_code == 200
