"""Node loss and return on a real swarm: a killed engine, a cut link, agents and fencing.

The session's Swarm server (``swarm_cluster``): grace 3 s, agents report
every 0.5 s, so an agent fences by itself after 2 s cut off (its lease).
A container's life is read from the host (its init process), since a killed
engine cannot say.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.server import TERMINAL, submit, wait_for, wait_state
from tests.kit.swarm_server import GRACE, INTERVAL, SwarmServer

IMAGE = "gpudock-test/busybox:latest"


@pytest.fixture
def cs(swarm_cluster: SwarmServer) -> Iterator[SwarmServer]:
    swarm_cluster.heal()
    yield swarm_cluster
    swarm_cluster.heal()
    swarm_cluster.cancel_unfinished()


def _pinned(cs: SwarmServer, node: str, retries: int = 1) -> int:
    """A long job on ``node`` (its Swarm label), running."""
    job_id = submit(
        cs.api,
        image=IMAGE,
        command=["sleep", "300"],
        gpus=1,
        retries=retries,
        node_selector={"kit.node": node},
    )
    wait_state(cs.api, job_id, {"RUNNING"}, 60)
    return job_id


def _init_pid(cs: SwarmServer, node: str, job_id: int, attempt: int = 0) -> int:
    """The host pid of the init of ``job_id``'s running container on ``node``."""
    labels = [f"gpudock.job={job_id}", f"gpudock.attempt={attempt}"]

    def pid() -> int | None:
        with contextlib.closing(cs.swarm.node(node).client()) as client:
            found = client.api.containers(filters={"label": labels})
            if not found:
                return None
            return int(client.api.inspect_container(found[0]["Id"])["State"]["Pid"]) or None

    found: int = wait_for(pid, 10, f"job {job_id}'s container to run on {node}")
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _requeued_after(cs: SwarmServer, job_id: int, fault: float) -> dict[str, Any]:
    """The job, requeued a grace after the node's last sign of life (its agent's last
    report, at most one interval before ``fault``)."""
    job = wait_state(cs.api, job_id, {"PENDING", "ALLOCATED", "STARTING"}, 30)
    lost = [e for e in job["events"] if e["to"] == "PENDING" and e["attempt"] == 1]
    assert lost and "lost" in lost[0]["reason"] and "retrying" in lost[0]["reason"], job["events"]
    assert lost[0]["at"] - fault >= GRACE - INTERVAL, "requeued before the grace ended"
    return job


def _cleanup(cs: SwarmServer, job_id: int) -> None:
    cs.api.post(f"/v1/jobs/{job_id}/cancel")
    wait_state(cs.api, job_id, TERMINAL, 60)


def test_a_killed_worker_engine_loses_its_jobs_after_the_grace(cs: SwarmServer) -> None:
    node = cs.swarm.node("sw2")
    job_id = _pinned(cs, "sw2")
    pid = _init_pid(cs, "sw2", job_id)
    killed = time.time()
    node.kill9()  # dockerd and its containerd; the container's shim and process live on
    wait_for(lambda: cs.swarm.states().get("sw2") == "down", 30, "down")
    _requeued_after(cs, job_id, killed)  # a grace after its last sign of life, before the kill
    wait_for(lambda: not _alive(pid), 10, "the agent to kill the orphaned container's init")
    node.start()
    back = time.monotonic()
    job = wait_state(cs.api, job_id, {"RUNNING"}, 60)  # attempt 1, once sw2 is fenced
    assert job["attempt"] == 1 and job["node"] == "sw2"
    with contextlib.closing(node.client()) as client:
        old = client.api.containers(
            all=True, filters={"label": [f"gpudock.job={job_id}", "gpudock.attempt=0"]}
        )
        assert not [c for c in old if c["State"] == "running"]
    assert time.monotonic() - back < 30
    _cleanup(cs, job_id)


def test_a_cut_link_loses_the_jobs_and_the_heal_finds_nothing_stale(cs: SwarmServer) -> None:
    node = cs.swarm.node("sw3")
    job_id = _pinned(cs, "sw3")
    pid = _init_pid(cs, "sw3", job_id)
    cut = time.time()
    node.cut()
    _requeued_after(cs, job_id, cut)
    assert not _alive(pid), "the agent, cut off, did not stop its node's container by itself"
    node.heal()
    job = wait_state(cs.api, job_id, {"RUNNING"}, 60)
    assert job["attempt"] == 1 and job["node"] == "sw3"
    events = cs.api.get("/v1/events", params={"type": "node.lost"}).json()["events"]
    assert any(e["node"] == "sw3" and job_id in e["payload"]["jobs"] for e in events)
    _cleanup(cs, job_id)


def test_after_the_heal_the_agent_kills_stale_containers_within_10s(cs: SwarmServer) -> None:
    node, agent = cs.swarm.node("sw3"), cs.agents["sw3"]
    job_id = _pinned(cs, "sw3", retries=0)
    pid = _init_pid(cs, "sw3", job_id)
    node.cut()
    agent.pause()  # hung: it watched the node until the cut, and now fences nothing itself
    job = wait_state(cs.api, job_id, {"LOST"}, 30)  # no retries left
    assert "node sw3 lost" in job["reason"] and _alive(pid)
    decoy = _decoy(cs, "sw3", job_id)  # one more of the lost attempt, that Swarm never knew
    assert {n["name"]: n for n in cs.api.get("/v1/nodes").json()}["sw3"]["status"] == "unavailable"
    node.heal()
    healed = time.monotonic()
    agent.resume()
    wait_for(lambda: not _alive(pid) and not _running(cs, "sw3", decoy), 10, "no stale container")
    assert time.monotonic() - healed <= 10
    wait_for(
        lambda: (
            {n["name"]: n for n in cs.api.get("/v1/nodes").json()}["sw3"]["status"] == "available"
        ),
        20,
        "sw3 to reopen once fenced",
    )
    fenced = cs.api.get("/v1/events", params={"type": "node.fenced"}).json()["events"]
    assert any(e["node"] == "sw3" and decoy in e["payload"]["killed"] for e in fenced)


def _decoy(cs: SwarmServer, node: str, job_id: int) -> str:
    """A running container on ``node`` labelled as ``job_id``'s attempt 0 (made behind the
    back of Swarm and gpudock, through the node's own engine)."""
    labels = {"gpudock.instance": cs.instance, "gpudock.job": str(job_id), "gpudock.attempt": "0"}
    with contextlib.closing(cs.swarm.node(node).client()) as client:
        container = client.containers.run(
            IMAGE, ["sleep", "300"], labels=labels, detach=True, init=True, network_mode="none"
        )
        return str(container.id)


def _running(cs: SwarmServer, node: str, container: str) -> bool:
    with contextlib.closing(cs.swarm.node(node).client()) as client:
        return bool(client.api.containers(filters={"id": container}))


def test_an_unwatched_node_keeps_its_job_until_the_operator_requeues_it(cs: SwarmServer) -> None:
    node, agent = cs.swarm.node("sw2"), cs.agents["sw2"]
    job_id = _pinned(cs, "sw2")
    agent.stop()
    # silent longer than the watch window (3 intervals, or Swarm's 5 heartbeats, + 2 s)
    wait_for(
        lambda: (
            (seen := {n["name"]: n for n in cs.api.get("/v1/nodes").json()}["sw2"])["agent"]
            == "silent"
            and seen["agent_seen_at"] < time.time() - 8
        ),
        30,
        "sw2's agent to have been silent for 8 s",
    )
    node.cut()
    wait_for(
        lambda: "no node agent" in (cs.api.get(f"/v1/jobs/{job_id}").json()["reason"] or ""),
        30,
        "the job to say it waits for the operator",
    )
    assert cs.api.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING"
    user = cs.api.post("/v1/tokens", json={"user": "alice"}).json()["token"]
    refused = cs.server.cli("job", "requeue", str(job_id), "--force", token=user, check=False)
    assert refused.returncode == 1 and "only an admin can force a requeue" in refused.stderr
    done = cs.server.cli("job", "requeue", str(job_id), "--force").stdout
    assert f"job {job_id} requeued (PENDING)" in done
    job = cs.api.get(f"/v1/jobs/{job_id}").json()
    assert job["attempt"] == 1 and "--force" in job["events"][-1]["reason"]
    _cleanup(cs, job_id)
