"""The Swarm backend on a real 3-node swarm, PostgreSQL and a node agent per node.

One server (and its agents) for the module; the swarm is the session's
(``tests/kit/swarm.py``). GPUs reach containers as ``NVIDIA_VISIBLE_DEVICES``
through each node's default runtime, the stand-in ``nvidia-container-runtime``,
whose log says which UUIDs each container got, and when it started and ended.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.kit.server import TERMINAL, gpudock_bin, submit, wait_for, wait_state
from tests.kit.swarm import SwarmCluster
from tests.kit.swarm_server import SwarmServer

IMAGE = "gpudock-test/busybox:latest"


@pytest.fixture
def cs(swarm_cluster: SwarmServer) -> Iterator[SwarmServer]:
    """The session's Swarm server, whole before and after each test."""
    swarm_cluster.heal()
    yield swarm_cluster
    swarm_cluster.heal()
    swarm_cluster.cancel_unfinished()


def _creates(swarm: SwarmCluster, job: int) -> list[dict[str, Any]]:
    return [r for r in swarm.runtime_log() if r["op"] == "create" and r.get("job") == str(job)]


def test_nodes_gpus_labels_and_agents_come_from_the_swarm(cs: SwarmServer) -> None:
    nodes = {n["name"]: n for n in cs.api.get("/v1/nodes").json()}
    assert sorted(nodes) == ["sw1", "sw2", "sw3"]
    for node in cs.swarm.nodes:
        seen = nodes[node.node_name]
        assert [g["uuid"] for g in seen["gpus"]] == node.gpus
        assert {g["name"] for g in seen["gpus"]} == {"NVIDIA H100 80GB HBM3"}
        assert seen["labels"]["kit.node"] == node.node_name  # Swarm's node label
        assert (seen["engine_state"], seen["availability"], seen["status"]) == (
            "ready",
            "active",
            "available",
        )
        assert seen["gpu_source"] == "agent" and seen["driver_version"] == "550.54.15"
    table = cs.server.cli("nodes").stdout
    assert "ready/active" in table and "watched" in table


def test_six_one_gpu_jobs_each_get_exactly_their_gpus_and_no_gpu_twice(cs: SwarmServer) -> None:
    command = ["sh", "-c", "echo visible=$NVIDIA_VISIBLE_DEVICES; sleep 1"]
    ids = [submit(cs.api, image=IMAGE, command=command, gpus=1) for _ in range(6)]
    jobs = [wait_state(cs.api, i, TERMINAL, 60) for i in ids]
    assert {j["state"] for j in jobs} == {"SUCCEEDED"}, [j["reason"] for j in jobs]
    assert sorted(j["node"] for j in jobs) == ["sw1", "sw1", "sw2", "sw2", "sw3", "sw3"]
    assert sorted(g for j in jobs for g in j["gpus"]) == sorted(
        g for n in cs.swarm.nodes for g in n.gpus
    )
    lives = cs.swarm.lives()
    held: list[tuple[str, float, float]] = []
    for job in jobs:
        (create,) = _creates(cs.swarm, job["id"])  # one container per attempt, no more
        assert create["devices"] == job["gpus"] and create["node"] == job["node"]
        start, end = lives[create["container_id"]]
        held += [(gpu, start, end) for gpu in create["devices"]]
        assert f"visible={job['gpus'][0]}" in cs.server.cli("logs", str(job["id"])).stdout
    for gpu, start, end in held:
        overlapping = [h for h in held if h[0] == gpu and h[1] < end and start < h[2]]
        assert len(overlapping) == 1, f"GPU {gpu} in two containers at once: {overlapping}"


def test_a_two_node_gang_talks_over_its_own_overlay(cs: SwarmServer) -> None:
    script = (
        "echo rank=$RANK node_rank=$NODE_RANK world=$WORLD_SIZE local=$LOCAL_WORLD_SIZE "
        'master=$MASTER_ADDR:$MASTER_PORT; if [ "$RANK" = 0 ]; then nc -l -p "$MASTER_PORT"; '
        'else for i in $(seq 100); do echo hello-from-rank-1 | nc -w 2 "$MASTER_ADDR" '
        '"$MASTER_PORT" && exit 0; sleep 0.2; done; exit 1; fi'
    )
    job_id = submit(cs.api, image=IMAGE, command=["sh", "-c", script], gpus=1, nodes=2)
    job = wait_state(cs.api, job_id, TERMINAL, 90)
    assert job["state"] == "SUCCEEDED", job["reason"]
    parts = job["gang"]
    assert [p["rank"] for p in parts] == [0, 1] and parts[0]["node"] != parts[1]["node"]
    log = cs.server.cli("logs", str(job_id)).stdout
    rank0 = log.split("==> rank 1")[0]
    assert "hello-from-rank-1" in rank0  # rank 0 printed what rank 1 sent
    assert "rank=0 node_rank=0 world=2 local=1" in log and "rank=1 node_rank=1" in log
    show = cs.server.cli("show", str(job_id)).stdout
    assert "rank 1" in show and parts[1]["node"] in show
    creates = {r["rank"]: r for r in _creates(cs.swarm, job_id)}
    assert [creates["0"]["devices"], creates["1"]["devices"]] == [p["gpus"] for p in parts]


def test_one_failing_member_stops_the_whole_gang(cs: SwarmServer) -> None:
    script = 'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; sleep 300'
    job_id = submit(cs.api, image=IMAGE, command=["sh", "-c", script], gpus=1, nodes=2)
    job = wait_state(cs.api, job_id, TERMINAL, 60)  # long before rank 0's 300 s
    rank1 = job["gang"][1]["node"]
    assert job["state"] == "FAILED" and job["exit_code"] == 3
    assert f"rank 1 on node {rank1}: exited with code 3" in job["reason"]
    rank0 = next(r for r in _creates(cs.swarm, job_id) if r["rank"] == "0")
    wait_for(
        lambda: cs.swarm.lives()[rank0["container_id"]][1] < time.time() - 0.1,
        30,
        "rank 0's container to be stopped with its gang",
    )


def test_drain_moves_no_running_job_and_no_new_job_lands_there(cs: SwarmServer) -> None:
    long = submit(cs.api, image=IMAGE, command=["sleep", "300"], gpus=1)
    node = wait_state(cs.api, long, {"RUNNING"}, 60)["node"]
    drained = cs.server.cli("node", "drain", node).stdout
    assert f"node {node}: availability drain" in drained
    again = cs.server.cli("node", "drain", node, check=False)
    assert again.returncode == 1 and f"node {node} is already drained" in again.stderr
    assert cs.api.post("/v1/nodes/nope/drain").status_code == 404
    others = [submit(cs.api, image=IMAGE, command=["sleep", "2"], gpus=1) for _ in range(4)]
    placed = [wait_state(cs.api, i, {"RUNNING", "SUCCEEDED"}, 60)["node"] for i in others]
    assert node not in placed
    waiting = submit(
        cs.api, image=IMAGE, command=["true"], gpus=1, node_selector={"kit.node": node}
    )
    time.sleep(2)  # several cycles
    assert cs.api.get(f"/v1/jobs/{waiting}").json()["state"] == "PENDING"
    assert cs.api.get(f"/v1/jobs/{long}").json()["state"] == "RUNNING"  # still, after the drain
    cs.server.cli("node", "uncordon", node)
    assert wait_state(cs.api, waiting, TERMINAL, 60)["node"] == node
    cs.api.post(f"/v1/jobs/{long}/cancel")
    for job_id in (long, *others):
        wait_state(cs.api, job_id, TERMINAL, 60)


def test_cancel_keeps_what_the_job_printed_during_its_stop_grace(cs: SwarmServer) -> None:
    script = "trap 'echo got TERM; exit 3' TERM; echo started; while true; do sleep 0.1; done"
    job_id = submit(cs.api, image=IMAGE, command=["sh", "-c", script], gpus=1)
    wait_state(cs.api, job_id, {"RUNNING"}, 60)
    assert cs.api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert wait_state(cs.api, job_id, TERMINAL, 60)["state"] == "CANCELLED"
    log = cs.server.cli("logs", str(job_id)).stdout
    assert "started" in log and "got TERM" in log


def test_an_image_missing_on_its_node_fails_the_job_with_the_reason(cs: SwarmServer) -> None:
    job_id = submit(cs.api, image="gpudock-test/absent:1", command=["true"], retries=2)
    job = wait_state(cs.api, job_id, TERMINAL, 60)
    assert job["state"] == "FAILED"
    assert f"image gpudock-test/absent:1 not found on node {job['node']}" in job["reason"]
    assert job["attempt"] == 0, job["events"]  # not retried


def test_bad_input_on_the_cluster_surface_is_refused_clearly(cs: SwarmServer) -> None:
    api = cs.api
    big = api.post("/v1/jobs", json={"image": IMAGE, "gpus": 1, "nodes": 4})
    assert big.status_code == 422
    assert (
        "needs 4 nodes (a gang) that can each take 1 GPU; the cluster has 3 nodes"
        in big.json()["error"]["message"]
    )
    for key in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        refused = api.post("/v1/jobs", json={"image": IMAGE, "gpus": 1, "env": {key: "all"}})
        assert refused.status_code == 422 and key in refused.text
    mounts = api.post("/v1/jobs", json={"image": IMAGE, "mounts": ["/tmp:/data"]})
    assert mounts.status_code == 422 and "backend swarm" in mounts.text
    assert api.post("/v1/tokens", json={"node": "sw9"}).status_code == 404
    token = cs.node_token("sw1")
    as_agent = {"Authorization": f"Bearer {token}"}
    other = httpx.post(
        f"{cs.server.url}/v1/agent/sync", headers=as_agent, json={"node": "sw2", "engine_ok": True}
    )
    assert other.status_code == 403 and "only for node sw1, not for node sw2" in other.text
    user_api = httpx.get(f"{cs.server.url}/v1/jobs", headers=as_agent)
    assert user_api.status_code == 403
    job_id = submit(api, image=IMAGE, command=["sleep", "300"], gpus=1)
    wait_state(api, job_id, {"RUNNING"}, 60)
    forced = cs.server.cli("job", "requeue", str(job_id), "--force", check=False)
    assert forced.returncode == 1 and "runs on a node that is ready" in forced.stderr
    api.post(f"/v1/jobs/{job_id}/cancel")
    wait_state(api, job_id, TERMINAL, 60)


def test_each_agent_serves_its_nodes_gauges_like_the_server(cs: SwarmServer) -> None:
    job_id = submit(cs.api, image=IMAGE, command=["sleep", "300"], gpus=1)
    job = wait_state(cs.api, job_id, {"RUNNING"}, 60)
    agent = cs.agents[job["node"]]
    gpu = job["gpus"][0]
    wait_for(lambda: f'job="{job_id}"' in agent.metrics(), 15, "the agent to see the job")
    page, server = agent.metrics(), cs.api.get("/metrics").text
    for family in (
        "gpudock_gpu_healthy",
        "gpudock_gpu_memory_total_bytes",
        "gpudock_gpu_allocated_ratio",
        "gpudock_gpu_allocation_info",
    ):
        mine = [line for line in page.splitlines() if line.startswith(family + "{") and gpu in line]
        theirs = [
            line for line in server.splitlines() if line.startswith(family + "{") and gpu in line
        ]
        assert mine and mine == theirs, (family, mine, theirs)
    assert f'gpudock_gpu_temperature_celsius{{node="{job["node"]}"' in page
    cs.api.post(f"/v1/jobs/{job_id}/cancel")
    wait_state(cs.api, job_id, TERMINAL, 60)


def test_the_server_refuses_to_start_without_a_swarm_manager(
    swarm: SwarmCluster, tmp_path: Path
) -> None:
    cases = {
        swarm.nodes[1].url: "is a worker",
        "unix:///var/run/docker.sock": "not in a swarm",  # the shared engine, only read
    }
    starts = []
    for number, url in enumerate(cases):
        home = tmp_path / str(number)
        home.mkdir()
        (home / "server.yaml").write_text(f"backend: swarm\nexecutor: {{docker_url: '{url}'}}\n")
        args = [
            gpudock_bin(),
            "server",
            "--config",
            str(home / "server.yaml"),
            "--home",
            str(home),
            "--port",
            "1",
        ]
        starts.append(subprocess.Popen(args, stderr=subprocess.PIPE, text=True))
    for start, reason in zip(starts, cases.values(), strict=True):
        _, stderr = start.communicate(timeout=120)
        assert start.returncode == 2, stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert reason in lines[-1] and len(lines[-1]) < 300
