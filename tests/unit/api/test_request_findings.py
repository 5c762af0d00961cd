"""What a probe of the API found (issue 38), pinned: the schema and the validation agree,
422s name the real cause, and text that is no Unicode is refused before it is stored.

An in-process server (SQLite, nothing running in the background, no engine
touched). Each body is judged by the served OpenAPI schema (``jsonschema_rs``,
the validator schemathesis uses) and sent: schema-valid bodies are accepted,
schema-invalid ones answer 422.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from gpudock.config import ServerConfig
from gpudock.server import Server, build_server

IMAGE = "busybox:latest"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = ServerConfig.model_validate({"node": {"cpus": 16, "memory": "64GiB"}})
    home: Path = tmp_path_factory.mktemp("findings")
    server = build_server(home, config, emulate_gpus="4xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


@pytest.fixture(scope="module")
def api(server: Server) -> TestClient:
    token = server.new_admin_token or ""
    return TestClient(server.app, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(scope="module")
def openapi(api: TestClient) -> dict[str, Any]:
    document: dict[str, Any] = api.get("/openapi.json").json()
    return document


def schema_of(openapi: dict[str, Any], name: str) -> Any:
    schema = {"$ref": f"#/components/schemas/{name}", "components": openapi["components"]}
    return jsonschema_rs.validator_for(schema)


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    return body


# ----------------------------------------------------- schema = validation


SPECS = [
    {"max_gpus": 2},  # 1 to 2 GPUs
    {"min_gpus": 1, "max_gpus": 2},
    {"gpus": "1-2", "elastic": "restart"},
    {"gpus_per_node": 1},
    {"gpus": "0-2"},
    {"gpus": "1-2000"},
    {"min_gpus": 0, "max_gpus": 2},
]


@pytest.mark.parametrize("fields", SPECS, ids=lambda f: json.dumps(f))
def test_a_job_spec_is_accepted_exactly_when_the_schema_says_so(
    api: TestClient, openapi: dict[str, Any], fields: dict[str, Any]
) -> None:
    body = {"image": IMAGE, "command": ["true"], **fields}
    valid = schema_of(openapi, "JobSpec").is_valid(body)
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == (201 if valid else 422), (valid, response.text)
    if response.status_code == 201:
        api.post(f"/v1/jobs/{response.json()['id']}/cancel")


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"gpus": 0, "max_gpus": 2}, "at least 1 GPU"),
        ({"min_gpus": 1, "gpus": 1, "max_gpus": 2}, "give min_gpus or gpus"),
        ({"gpus_per_node": 1, "gpus": 1}, "give gpus_per_node or gpus"),
        ({"elastic": "restart", "gpus": 2}, "elastic: restart needs a GPU range"),
        ({"gpus": "1-2", "max_gpus": 3}, "not both"),
        ({"gpus": "2-4", "gpu_memory": "1GiB"}, "whole GPUs"),
        ({"gpus": "4-2"}, "must not be greater than max_gpus"),
    ],
)
def test_rules_between_fields_are_a_422_naming_them(
    api: TestClient, fields: dict[str, Any], why: str
) -> None:
    """What JSON Schema cannot say here (schemathesis.toml lists POST /v1/jobs' 422s)."""
    body = {"image": IMAGE, "command": ["true"], **fields}
    assert why in error(api.post("/v1/jobs", json=body), 422)["message"]


def test_max_gpus_alone_means_one_to_that_many(api: TestClient) -> None:
    job = api.post("/v1/jobs", json={"image": IMAGE, "command": ["true"], "max_gpus": 3}).json()
    assert (job["spec"]["gpus"], job["spec"]["max_gpus"]) == (1, 3)
    api.post(f"/v1/jobs/{job['id']}/cancel")


@pytest.mark.parametrize(
    "fields",
    [
        {"expires": "1h30m"},
        {"expires": 1.5},
        {"expires": 0},
        {"expires": "0s"},
        {"expires": "1e3"},
        {"expires": -5},
        {"name": "laptop 1"},
        {"name": "bad/name"},
        {"name": ""},
    ],
    ids=lambda f: json.dumps(f),
)
def test_a_token_is_created_exactly_when_the_schema_says_so(
    api: TestClient, openapi: dict[str, Any], fields: dict[str, Any]
) -> None:
    body = {"user": "bob", **fields}
    valid = schema_of(openapi, "TokenCreate").is_valid(body)
    assert api.post("/v1/tokens", json=body).status_code == (201 if valid else 422)


def test_an_empty_patch_is_schema_invalid_and_refused(
    api: TestClient, openapi: dict[str, Any]
) -> None:
    job = api.post("/v1/jobs", json={"image": IMAGE, "command": ["true"], "gpus": 1}).json()
    assert not schema_of(openapi, "JobUpdate").is_valid({})
    assert "nothing to update" in error(api.patch(f"/v1/jobs/{job['id']}", json={}), 422)["message"]


@pytest.mark.parametrize(
    ("traits", "accepted"),
    [
        ({"taints": ["gpu=a100:NoSchedule"], "labels": {"zone": "a"}}, True),
        ({"taints": [""]}, False),
        ({"taints": ["k=v:NoExecute"]}, False),
        ({"labels": {"bad key": "x"}}, False),
        ({"labels": {"zone": "-bad"}}, False),
    ],
)
def test_node_traits_are_applied_exactly_when_the_schema_says_so(
    api: TestClient, server: Server, openapi: dict[str, Any], traits: dict[str, Any], accepted: bool
) -> None:
    body = {"nodes": {server.ctx.node_name: traits}}
    assert schema_of(openapi, "ClusterConfig").is_valid(body) is accepted
    status = api.post("/v1/admin/config/diff", json=body).status_code
    assert status == (200 if accepted else 422)


def test_a_method_the_estimates_path_lacks_is_405_not_a_bad_job_id(api: TestClient) -> None:
    response = api.patch("/v1/jobs/estimates", json={"gpus": 1})
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == "GET, HEAD"
    assert error(api.patch("/v1/jobs/abc", json={"gpus": 1}), 422)["field"] == "job_id"


# ----------------------------------------------------- 422s that name the cause


def test_a_yaml_config_is_told_to_send_json_not_that_it_sent_json(api: TestClient) -> None:
    yaml = "priority_classes: []\n"
    body = error(
        api.put("/v1/admin/config", content=yaml, headers={"Content-Type": "application/yaml"}),
        422,
    )
    assert body["field"] == "body"
    assert "got Content-Type: application/yaml" in body["message"]
    assert "gpudock admin apply" in body["message"]
    plain = error(api.put("/v1/admin/config", content=yaml), 422)["message"]
    assert "got no Content-Type" in plain


def test_a_registry_login_names_what_is_wrong_with_it(api: TestClient) -> None:
    put = "/v1/registries/registry.example.com"
    assert error(api.put(put, json=["alice", "pw"]), 422)["message"] == (
        "body: expected a JSON object, got an array"
    )
    assert error(api.put(put, json={"username": "alice", "password": ""}), 422)["message"] == (
        "password must be 1-4096 characters"
    )
    long = error(api.put(put, json={"username": "alice", "password": "x" * 5000}), 422)
    assert long["message"] == "password must be 1-4096 characters"
    assert "invalid JSON" in error(api.put(put, content=b'{"username": "a"', headers={
        "Content-Type": "application/json"}), 422)["message"]  # fmt: skip


# ----------------------------------------------------- text that is no Unicode


def raw(api: TestClient, method: str, path: str, text: str) -> Any:
    return api.request(method, path, content=text, headers={"Content-Type": "application/json"})


def test_a_lone_surrogate_is_refused_before_anything_is_stored(api: TestClient) -> None:
    before = api.get("/v1/jobs").json()
    body = error(
        raw(api, "POST", "/v1/jobs", '{"image": "x", "command": ["echo", "\\ud800"]}'), 422
    )
    assert body["field"] == "command.1"
    assert "lone UTF-16 surrogate (\\ud800)" in body["message"]
    login = '{"username": "alice", "password": "\\udfff"}'
    assert error(raw(api, "PUT", "/v1/registries/r.example.com", login), 422)["field"] == (
        "password"
    )
    assert api.get("/v1/jobs").json() == before  # nothing stored; listing still answers


def test_a_surrogate_pair_is_a_character_and_welcome(api: TestClient) -> None:
    text = '{"image": "busybox", "command": ["echo", "\\ud83d\\ude00"]}'
    response = raw(api, "POST", "/v1/jobs", text)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["command"] == ["echo", "\N{GRINNING FACE}"]
    api.post(f"/v1/jobs/{response.json()['id']}/cancel")
