"""``gpudock swarm deploy-agent``: the agent as a Swarm global service, and its enrollment.

The service and its tasks are real (one per node, its secret delivered by
Swarm); the image is a stand-in whose entrypoint only sleeps (an image with
Python and gpudock takes minutes to build here), so each task's enrollment
is done by the test, with the task's own ids and the secret read from inside
the task's container: exactly what ``gpudock agent --enroll-file`` sends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.kit.server import wait_for
from tests.kit.swarm_server import SwarmServer

STAND_IN = "gpudock-test/agent-stand-in:1"


@pytest.fixture
def cs(swarm_cluster: SwarmServer) -> Iterator[SwarmServer]:
    swarm_cluster.heal()
    yield swarm_cluster
    with contextlib.closing(swarm_cluster.swarm.client()) as client:
        for service in client.api.services(filters={"label": "gpudock.agent"}):
            client.api.remove_service(service["ID"])
    swarm_cluster.heal()


def _tasks(cs: SwarmServer, service: str) -> list[dict[str, Any]]:
    with contextlib.closing(cs.swarm.client()) as client:
        tasks = client.api.tasks(filters={"service": service, "desired-state": "running"})
    return [t for t in tasks if t["Status"]["State"] == "running"]


def _secret_in(cs: SwarmServer, task: dict[str, Any]) -> str:
    node = next(n for n in cs.swarm.nodes if n.engine_id == task["NodeID"])
    with contextlib.closing(node.client()) as client:
        container = client.containers.get(task["Status"]["ContainerStatus"]["ContainerID"])
        code, out = container.exec_run(["cat", "/run/secrets/gpudock-agent-enroll"])
    assert code == 0, out
    return str(out.decode().strip())


def test_the_agent_service_runs_everywhere_and_a_task_enrolls_for_its_node_only(
    cs: SwarmServer,
) -> None:
    cs.swarm.commit_image(STAND_IN, ["sh", "-c", "sleep 3600", "--"])
    out = cs.server.cli(
        "swarm",
        "deploy-agent",
        STAND_IN,
        "--server-url",
        cs.server.url,
        "--docker-socket",
        "/dev/null",
    ).stdout
    service = f"gpudock-agent-{cs.instance}"
    assert f"agent service {service} deployed" in out
    with contextlib.closing(cs.swarm.client()) as client:
        spec = client.api.inspect_service(service)["Spec"]
    container = spec["TaskTemplate"]["ContainerSpec"]
    assert "Global" in spec["Mode"]
    assert container["Args"][:3] == ["agent", "--server", cs.server.url]
    assert "GPUDOCK_TASK_ID={{.Task.ID}}" in container["Env"]
    assert container["Mounts"][0]["Source"] == "/dev/null"
    assert spec["TaskTemplate"]["Networks"][0]["Target"]  # the host network
    tasks = wait_for(lambda: len(t := _tasks(cs, service)) == 3 and t, 60, "a task per node")
    task = next(t for t in tasks if t["NodeID"] == cs.swarm.node("sw2").engine_id)
    secret = _secret_in(cs, task)
    enroll = f"{cs.server.url}/v1/agent/enroll"
    as_task = {"Authorization": f"Bearer {secret}"}
    elsewhere = cs.swarm.node("sw1").engine_id
    lying = httpx.post(enroll, headers=as_task, json={"node_id": elsewhere, "task_id": task["ID"]})
    assert lying.status_code == 403 and "not on node" in lying.text
    admin = httpx.post(
        enroll,
        headers={"Authorization": f"Bearer {cs.server.admin_token}"},
        json={"node_id": task["NodeID"], "task_id": task["ID"]},
    )
    assert admin.status_code == 403
    enrolled = httpx.post(
        enroll, headers=as_task, json={"node_id": task["NodeID"], "task_id": task["ID"]}
    )
    assert enrolled.status_code == 200, enrolled.text
    assert enrolled.json()["node"] == "sw2"
    as_node = {"Authorization": f"Bearer {enrolled.json()['token']}"}
    sync = f"{cs.server.url}/v1/agent/sync"
    mine = httpx.post(sync, headers=as_node, json={"engine_ok": True})
    assert mine.status_code == 200 and mine.json()["node"] == "sw2"
    other = httpx.post(sync, headers=as_node, json={"node": "sw3", "engine_ok": True})
    assert other.status_code == 403
    assert httpx.post(sync, headers=as_task, json={"engine_ok": True}).status_code == 403
    cs.server.cli(
        "swarm",
        "deploy-agent",
        STAND_IN,
        "--server-url",
        cs.server.url,
        "--docker-socket",
        "/dev/null",
    )
    stale = httpx.post(
        enroll, headers=as_task, json={"node_id": task["NodeID"], "task_id": task["ID"]}
    )
    assert stale.status_code == 401 and "revoked" in stale.text  # a redeploy retires it
