"""The REST API's promises: precise 4xx errors, auth, and who sees what."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_state

pytestmark = pytest.mark.docker


@pytest.fixture
def api(server: ServerProcess) -> httpx.Client:
    return server.api()


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    assert "Traceback" not in body["message"]
    return body


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        ({"image": TEST_IMAGE, "gpus": -1}, "gpus", "greater than or equal to 0"),
        ({"image": TEST_IMAGE, "gpu_memory": "20XB"}, "gpu_memory", "unknown size unit 'XB'"),
        ({"image": TEST_IMAGE, "gpu_memory": "20GiB"}, "gpu_memory", "give gpus (1 or more)"),
        ({"image": "  "}, "image", "image must not be empty"),
        ({"image": TEST_IMAGE, "gpuz": 2}, "gpuz", "unknown field"),
        ({"gpus": 1}, "image", "field required"),
        ({"image": TEST_IMAGE, "max_runtime": "soon"}, "max_runtime", "expected a duration"),
        ({"image": TEST_IMAGE, "env": {"GPUDOCK_JOB_ID": "1"}}, "env", "reserved"),
        ({"image": TEST_IMAGE, "mounts": ["/etc:/x"]}, "mounts", "not in the admin allowlist"),
        (
            {"image": TEST_IMAGE, "node_selector": {"bad key": "x"}},
            "node_selector",
            "label key 'bad key' must be 1-63 letters",
        ),
        (
            {"image": TEST_IMAGE, "node_selector": ["zone"]},
            "node_selector",
            "node selector 'zone' must look like key=value",
        ),
        (
            {"image": TEST_IMAGE, "tolerations": ["spot:NoExecute"]},
            "tolerations",
            "toleration 'spot:NoExecute': effect must be NoSchedule, got 'NoExecute'",
        ),
        (
            {"image": TEST_IMAGE, "topology": "pcie"},
            "topology",
            "topology: Input should be 'nvlink' or 'numa'",
        ),
    ],
)
def test_bad_specs_get_a_422_that_names_the_field(
    api: httpx.Client, spec: dict[str, Any], field: str, text: str
) -> None:
    body = error(api.post("/v1/jobs", json=spec), 422)
    assert field in (body["field"] or "")
    assert text in body["message"]


def test_a_job_that_can_never_fit_is_rejected_with_the_reason(api: httpx.Client) -> None:
    body = error(api.post("/v1/jobs", json={"image": TEST_IMAGE, "gpus": 16}), 422)
    assert re.fullmatch(
        r"job can never be scheduled: needs 16 GPUs; node \S+ has only 4", body["message"]
    ), body["message"]
    assert body["field"] == "gpus"
    body = error(
        api.post("/v1/jobs", json={"image": TEST_IMAGE, "gpus": 1, "gpu_model": "A100"}), 422
    )
    assert "A100" in body["message"] and "H100" in body["message"]
    body = error(
        api.post("/v1/jobs", json={"image": TEST_IMAGE, "gpus": 1, "gpu_memory": "100GiB"}), 422
    )
    # what shares may take of an 80GiB GPU: its memory less the 512MiB reserve
    assert "100GiB" in body["message"] and "79.5GiB" in body["message"]
    body = error(api.post("/v1/jobs", json={"image": TEST_IMAGE, "cpus": 4096}), 422)
    assert body["code"] == "Infeasible" and body["field"] == "cpus"
    assert body["message"].startswith(
        "job can never be scheduled: needs 4096 CPUs; the largest node has"
    )
    picky = {"image": TEST_IMAGE, "gpus": 1, "node_selector": {"zone": "nowhere"}}
    body = error(api.post("/v1/jobs", json=picky), 422)
    assert (body["code"], body["field"]) == ("Infeasible", "node_selector")
    assert body["message"] == (
        "job can never be scheduled: no node matches node selector zone=nowhere"
    )
    assert api.get("/v1/jobs").json() == []  # nothing was stored


def test_unknown_job_and_bad_filters(api: httpx.Client) -> None:
    assert error(api.get("/v1/jobs/999"), 404)["message"] == "job 999 not found"
    assert error(api.post("/v1/jobs/999/cancel"), 404)["message"] == "job 999 not found"
    assert error(api.get("/v1/jobs/abc"), 422)["field"] == "job_id"
    body = error(api.get("/v1/jobs", params={"state": "DONE"}), 422)
    assert "unknown state 'DONE'" in body["message"] and "RUNNING" in body["message"]


def test_ids_no_job_can_have_and_nul_filters(api: httpx.Client) -> None:
    """Not a 500: PostgreSQL ids are 32-bit, SQLite's 64-bit, and neither stores NUL."""
    for job_id in (2**31, 2**63, 10**20):
        assert error(api.get(f"/v1/jobs/{job_id}"), 404)["message"] == f"job {job_id} not found"
        assert error(api.post(f"/v1/jobs/{job_id}/cancel"), 404)
        assert error(api.get(f"/v1/jobs/{job_id}/logs"), 404)
    assert api.get("/v1/jobs", params={"user": "a\x00"}).json() == []
    assert api.get("/v1/jobs", params={"queue": "a\x00"}).json() == []


@pytest.mark.parametrize(
    ("body", "content_type", "field", "text"),
    [
        ("{bad", "application/json", "body", "body: invalid JSON at character 1: Expecting"),
        ('{"image": "x"}', "text/plain", "body", "got Content-Type: text/plain"),
        ("image=x", "application/x-www-form-urlencoded", "body", "expected a JSON object"),
        ('{"image": "x", "gpus": 1, "gpu_memory": Infinity}', "application/json", "gpu_memory",
         "gpu_memory: size must be a finite number"),
        ('{"image": "x", "memory": 1e30}', "application/json", "memory", "is too large"),
        ('{"image": "x", "gpu_memory": [1]}', "application/json", "gpu_memory", "expected a size"),
        ('{"image": "x", "max_runtime": NaN}', "application/json", "max_runtime",
         "max_runtime: duration must be a finite number"),
        ('{"image": "x", "max_runtime": "inf"}', "application/json", "max_runtime", "finite"),
        ('{"image": "x", "max_runtime": [1]}', "application/json", "max_runtime", "expected a"),
        ('{"image": "x", "cpus": NaN}', "application/json", "cpus", "should be a finite number"),
        ('{"image": "x", "gpu_model": "H100\\u0000"}', "application/json", "gpu_model", "NUL"),
        ('{"image": "x", "env": {"A": "\\u0000"}}', "application/json", "env", "NUL"),
        ('{"image": "x", "queue": "default\\n"}', "application/json", "queue", "queue must be"),
    ],
)  # fmt: skip
def test_malformed_bodies_and_numbers_get_a_precise_422(
    api: httpx.Client, body: str, content_type: str, field: str, text: str
) -> None:
    response = api.post("/v1/jobs", content=body, headers={"Content-Type": content_type})
    found = error(response, 422)
    assert found["field"] == field and text in found["message"]
    assert api.get("/v1/jobs").json() == []  # nothing was stored


def test_a_job_stored_under_looser_rules_stays_readable(server: ServerProcess) -> None:
    """A spec today's validation refuses (accepted before) never makes reads fail."""
    from gpudock.store.db import Database
    from gpudock.store.models import JobRow

    api = server.api()
    job_id = submit(api, image=TEST_IMAGE, command=["true"])
    database = Database.open(server.db_url or f"sqlite:///{server.home / 'gpudock.db'}")
    with database.write() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        row.spec = {**row.spec, "queue": "default\n"}
    database.close()
    assert api.get(f"/v1/jobs/{job_id}").json()["spec"]["queue"] == "default\n"
    assert [j["id"] for j in api.get("/v1/jobs").json()] == [job_id]


def test_every_request_needs_a_valid_token(server: ServerProcess) -> None:
    assert error(httpx.get(server.url + "/v1/jobs"), 401)["message"].startswith("missing")
    assert error(server.api(token="gpd_nope").get("/v1/jobs"), 401)["message"] == ("invalid token")
    assert httpx.get(server.url + "/healthz").status_code == 200  # probes need no token


def test_users_see_and_cancel_only_their_own_jobs(server: ServerProcess) -> None:
    admin = server.api()
    tokens = {}
    for user in ("alice", "bob"):
        response = admin.post("/v1/tokens", json={"user": user})
        assert response.status_code == 201
        tokens[user] = response.json()["token"]
    alice, bob = server.api(tokens["alice"]), server.api(tokens["bob"])
    job = submit(alice, image=TEST_IMAGE, command=["sleep", "60"], gpus=1)
    assert [j["id"] for j in alice.get("/v1/jobs").json()] == [job]
    assert bob.get("/v1/jobs").json() == []
    assert bob.get("/v1/jobs", params={"user": "alice"}).json() == []
    assert error(bob.get(f"/v1/jobs/{job}"), 404)["message"] == f"job {job} not found"
    assert error(bob.post(f"/v1/jobs/{job}/cancel"), 404)
    assert error(bob.post("/v1/tokens", json={"user": "mallory"}), 403)
    assert (
        "user 'eve\\n' must be"
        in error(admin.post("/v1/tokens", json={"user": "eve\n"}), 422)["message"]
    )
    assert [j["user"] for j in admin.get("/v1/jobs").json()] == ["alice"]
    assert alice.post(f"/v1/jobs/{job}/cancel").status_code == 200
    assert wait_state(admin, job, {"CANCELLED"})["reason"] == "cancelled by alice"


def test_openapi_and_inventory(server: ServerProcess) -> None:
    api = server.api()
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    for path in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/logs",
        "/v1/nodes",
        "/v1/gpus",
        "/healthz",
    ):
        assert path in paths
    gpus = api.get("/v1/gpus").json()
    assert len(gpus) == 4 and all(g["emulated"] and "H100" in g["name"] for g in gpus)
    assert len({g["uuid"] for g in gpus}) == 4
    (node,) = api.get("/v1/nodes").json()
    assert (node["status"], node["gpu_source"], node["gpus_total"]) == ("available", "emulated", 4)


NODE_CONFIG: dict[str, Any] = {
    **FAST_CONFIG,
    "node_name": "gpu-07",
    "node": {
        "labels": {"zone": "b", "gpu.family": "hopper"},
        "taints": ["reserved=training"],
        "cpus": 16,
        "memory": "64GiB",
        "topology": {"nvlink": [[0, 1], [2, 3, 5]]},  # GPU 5: this node has only 4
    },
}


@pytest.fixture
def labelled(make_server: Callable[..., ServerProcess], db_url: str) -> ServerProcess:
    """4 emulated H100s on a node with labels, a taint, 16 CPUs and a declared NVLink split."""
    return make_server(db_url=db_url, config=NODE_CONFIG).start()


def test_the_inventory_shows_labels_taints_cpus_and_topology(labelled: ServerProcess) -> None:
    api = labelled.api()
    (node,) = api.get("/v1/nodes").json()
    assert (node["name"], node["labels"], node["taints"]) == (
        "gpu-07",
        {"gpu.family": "hopper", "zone": "b"},
        ["reserved=training:NoSchedule"],
    )
    assert (node["cpus"], node["cpus_used"]) == (16.0, 0.0)
    gpus = api.get("/v1/gpus").json()
    # NVLink declared (it wins); NUMA as the emulator has it: halves of the node.
    assert [(g["index"], g["nvlink"], g["numa"]) for g in gpus] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 1, 1),
        (3, 1, 1),
    ]
    assert [(g["nvlink"], g["numa"]) for g in node["gpus"]] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    assert "node.topology names GPU 5, which gpu-07 does not have (it has 0-3); ignored" in (
        labelled.log()
    )


def test_placement_constraints_are_stored_and_shown(labelled: ServerProcess) -> None:
    api = labelled.api()
    job_id = submit(
        api,
        image=TEST_IMAGE,
        command=["true"],
        gpus=2,
        cpus=2,
        node_selector=["zone=b"],
        tolerations=["reserved", "reserved=training:NoSchedule"],
        topology="nvlink",
    )

    spec = api.get(f"/v1/jobs/{job_id}").json()["spec"]

    assert spec["node_selector"] == {"zone": "b"}
    assert spec["tolerations"] == ["reserved", "reserved=training:NoSchedule"]
    assert spec["topology"] == "nvlink"
    listed = api.get("/v1/jobs").json()
    assert [j["spec"]["topology"] for j in listed] == ["nvlink"]
