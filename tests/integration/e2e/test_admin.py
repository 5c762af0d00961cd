"""Live administration on a real server: `gpudock admin diff|apply|get` while jobs run,
a refused apply, the event log, and SIGHUP reloading the config file."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_for, wait_state

pytestmark = pytest.mark.docker

SCHEDULER = {
    "priority_classes": [{"name": "urgent", "value": 100}],
    "queues": {"queues": [{"name": "vision", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}}]},
}


def sleeper(queue: str, **more: Any) -> dict[str, Any]:
    return {"image": TEST_IMAGE, "command": ["sleep", "300"], "gpus": 1, "queue": queue, **more}


def config_in_force(api: httpx.Client) -> dict[str, Any]:
    response = api.get("/v1/admin/config")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_apply_and_diff_while_jobs_run(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # a node may get the label later: such jobs wait rather than being refused at submit
    scheduler = {**SCHEDULER, "never_fits": "pending"}
    server = make_server(config={**FAST_CONFIG, "scheduler": scheduler}).start()
    api = server.api()
    node = api.get("/v1/nodes").json()[0]["name"]
    running = [submit(api, **sleeper("vision")) for _ in range(2)]
    for job_id in running:
        wait_state(api, job_id, {"RUNNING"})
    picky = submit(api, **sleeper("default", node_selector={"zone": "a"}))  # no node has it
    assert api.post("/v1/jobs", json=sleeper("nlp")).status_code == 422  # not declared yet
    waits = wait_for(
        lambda: (j := api.get(f"/v1/jobs/{picky}").json())["pending_reasons"] and j,
        what="a constraints reason",
    )
    assert waits["pending_reasons"][0]["message"] == "no node matches node selector zone=a"

    lower = tmp_path / "cluster.yaml"
    lower.write_text(
        yaml.safe_dump(
            {
                "priority_classes": SCHEDULER["priority_classes"],
                "queues": {
                    "queues": [
                        {"name": "vision", "guarantee": {"gpus": 1}, "limit": {"gpus": 1}},
                        {"name": "nlp"},
                    ]
                },
                "nodes": {node: {"labels": {"zone": "a"}}},
            }
        )
    )
    diff = server.cli("admin", "diff", "-f", str(lower)).stdout
    assert "~ queues.queues[vision].limit.gpus: 4.0 -> 1.0" in diff
    assert f'+ nodes.{node}: {{"labels": {{"zone": "a"}}, "taints": []}}' in diff
    assert config_in_force(api)["version"] == 0, "a diff changes nothing"

    applied = server.cli("admin", "apply", "-f", str(lower)).stdout
    assert "applied config version 1" in applied
    wait_state(api, picky, {"RUNNING"})  # the node's new label counts on the next cycle
    submit(api, **sleeper("nlp"))  # the submit check reads the config in force
    late = submit(api, **sleeper("vision"))
    waiting = wait_for(
        lambda: (j := api.get(f"/v1/jobs/{late}").json())["pending_reasons"] and j,
        what="a quota reason",
    )
    assert waiting["pending_reasons"][0]["layer"] == "quota"
    assert "limit" in waiting["pending_reasons"][0]["message"]
    for job_id in running:  # lowering the quota stops nobody by itself
        assert api.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING"

    got = server.cli("admin", "get").stdout
    assert got.startswith("# version 1 (api, by admin)")
    assert yaml.safe_load(got)["nodes"] == {node: {"labels": {"zone": "a"}, "taints": []}}

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"queues": {"queues": [{"name": "x", "members": ["nobody"]}]}}))
    refused = server.cli("admin", "apply", "-f", str(bad), check=False)
    assert refused.returncode == 2
    assert "queues.queues[0].members[0]: unknown user 'nobody'" in refused.stderr
    assert config_in_force(api)["version"] == 1
    lifo = api.put("/v1/admin/config", json={"queueing": ["borrow-last", "lifo"]})
    assert lifo.status_code == 422, lifo.text
    assert lifo.json()["error"]["message"] == (
        "queueing: unknown queueing strategy 'lifo' (known: borrow-last, strict-fifo)"
    )
    assert config_in_force(api)["version"] == 1

    events = api.get("/v1/events", params={"type": "config.applied"}).json()["events"]
    assert [(e["payload"]["version"], e["payload"]["by"]) for e in events] == [(1, "admin")]


def test_sighup_reloads_the_config_file_with_the_same_rules(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server(config={**FAST_CONFIG, "scheduler": SCHEDULER}).start()
    api = server.api()
    assert server.proc is not None

    raised = {"queues": {"queues": [{"name": "vision", "limit": {"gpus": 3}}]}}
    server.config_path.write_text(yaml.safe_dump({**FAST_CONFIG, "scheduler": raised}))
    server.proc.send_signal(signal.SIGHUP)
    current = wait_for(lambda: (c := config_in_force(api))["version"] == 1 and c, what="the reload")
    assert current["source"] == "sighup"
    assert current["config"]["queues"]["queues"][0]["limit"] == {"gpus": 3.0}
    assert current["config"]["priority_classes"] == []

    broken = {"queues": {"queues": [{"name": "vision", "cohort": "missing"}]}}
    server.config_path.write_text(yaml.safe_dump({**FAST_CONFIG, "scheduler": broken}))
    server.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "config reload refused" in server.log_all(), what="the refusal logged")
    assert "unknown cohort 'missing'" in server.log_all()
    assert config_in_force(api)["version"] == 1
    assert server.proc.poll() is None, "the server keeps running"
