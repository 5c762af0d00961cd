#!/usr/bin/env python3
"""Swarm backend: submit→running against bare ``docker service create``, node loss, agent cost.

Builds the test kit's real 3-node swarm (``tests/kit/swarm.py``: three
private dockerds in network namespaces, needs root) and runs ``gpudock
server --backend swarm`` on a fresh PostgreSQL database
(``GPUDOCK_TEST_PG_URL``) with an agent on every node. In one run it measures:

* ``submit_to_running``: ``--samples`` one-GPU jobs, one at a time, from the
  submit request until a poll (every 10 ms) sees the job RUNNING; beside it,
  ``bare``: the same container as a bare ``replicated-job`` service pinned to
  the same node, from the create call until its task runs. Alternated, so
  both see the same load. ``ratio`` = gpudock's median over bare's (goal 1.3);
  ``gpudock_phases``: submit to STARTING and STARTING to RUNNING, from the
  job's events;
* ``link_cut``: a job's node loses its link; seconds until Swarm marks it
  down, and until the job is requeued (the goal: the grace plus at most 5 s);
* ``agent``: each agent's CPU (share of one core) and RSS over ``--idle``
  seconds with no job, at the server's report interval;
* ``leader_death``: a ``--standby`` follower beside the server (agents report
  to both); the leader is killed (SIGKILL) and a job submitted through the
  follower at once: seconds until the follower leads (``/healthz``), and until
  that job runs, the next placement (goal: 10 s).

Usage: ``benchmarks/swarm.py [--json] [--samples 15] [--idle 30] [--grace 20]
[--agent-interval 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks._meta import build_info  # noqa: E402
from tests.kit.pg import fresh_database  # noqa: E402
from tests.kit.server import ServerProcess, wait_for, wait_state  # noqa: E402
from tests.kit.swarm import BRIDGE_ADDRESS, SwarmCluster  # noqa: E402
from tests.kit.swarm_server import SwarmServer, fast_config, swarm_server  # noqa: E402

IMAGE = "gpudock-test/busybox:latest"
POLL = 0.01
TICKS = os.sysconf("SC_CLK_TCK")


def gpudock_sample(cs: SwarmServer) -> tuple[float, str, str, dict[str, float]]:
    """Seconds from submit to RUNNING of one one-GPU job; its node and GPU; its phases
    from the job's own events (``queued_s``: submit to STARTING, ``launch_s``:
    STARTING to RUNNING, the server's clock)."""
    api = cs.api
    began = time.perf_counter()
    response = api.post("/v1/jobs", json={"image": IMAGE, "command": ["sleep", "1"], "gpus": 1})
    job_id = response.json()["id"]
    while (job := api.get(f"/v1/jobs/{job_id}").json())["state"] not in ("RUNNING", "SUCCEEDED"):
        time.sleep(POLL)
    took = time.perf_counter() - began
    ended = wait_state(api, job_id, {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}, 120)
    if ended["state"] != "SUCCEEDED":
        raise RuntimeError(f"job {job_id} ended {ended['state']}: {ended['reason']}")
    at = {e["to"]: e["at"] for e in reversed(api.get(f"/v1/jobs/{job_id}").json()["events"])}
    phases = {
        "queued_s": at["STARTING"] - at["PENDING"],
        "launch_s": at["RUNNING"] - at["STARTING"],
    }
    return took, job["node"], job["gpus"][0], phases


def bare_sample(swarm: SwarmCluster, node: str, gpu: str, number: int) -> float:
    """Seconds from ``docker service create`` (pinned to ``node``) until its task runs."""
    engine_id = swarm.node(node).engine_id
    spec = {
        "Name": f"bench-bare-{number}",
        "Labels": {"gpudock.bench": "bare"},
        "TaskTemplate": {
            "ContainerSpec": {
                "Image": IMAGE,
                "Args": ["sleep", "1"],
                "Env": [f"NVIDIA_VISIBLE_DEVICES={gpu}"],
                "Init": True,
            },
            "RestartPolicy": {"Condition": "none"},
            "Placement": {"Constraints": [f"node.id=={engine_id}"]},
        },
        "Mode": {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
    }
    with contextlib.closing(swarm.client()) as client:
        api = client.api
        began = time.perf_counter()
        api._raise_for_status(api._post_json(api._url("/services/create"), data=spec))
        while True:
            tasks = api.tasks(filters={"service": spec["Name"]})
            if tasks and tasks[0]["Status"]["State"] in ("running", "complete"):
                break
            time.sleep(POLL)
        took = time.perf_counter() - began
        wait_for(
            lambda: (
                api.tasks(filters={"service": spec["Name"]})[0]["Status"]["State"] == "complete"
            ),
            60,
            "the bare service to end",
        )
        api.remove_service(spec["Name"])
    return took


def latencies(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_s": round(statistics.median(ordered), 3), "p90_s": round(p90, 3)}


def submit_to_running(cs: SwarmServer, samples: int) -> dict[str, Any]:
    ours, bare = [], []
    phases: dict[str, list[float]] = {"queued_s": [], "launch_s": []}
    for number in range(samples):
        took, node, gpu, phase = gpudock_sample(cs)
        ours.append(took)
        for key, value in phase.items():
            phases[key].append(value)
        bare.append(bare_sample(cs.swarm, node, gpu, number))
    gpudock, plain = latencies(ours), latencies(bare)
    return {
        "samples": samples,
        "gpudock": gpudock,
        "gpudock_phases": {key: latencies(values) for key, values in phases.items()},
        "bare": plain,
        "ratio": round(gpudock["median_s"] / plain["median_s"], 2),
    }


def link_cut(cs: SwarmServer, grace: float) -> dict[str, Any]:
    """Cut a running job's node off; when is it down, and when is the job requeued?"""
    api, node = cs.api, cs.swarm.node("sw3")
    job_id = api.post(
        "/v1/jobs",
        json={
            "image": IMAGE,
            "command": ["sleep", "600"],
            "gpus": 1,
            "retries": 1,
            "node_selector": {"kit.node": "sw3"},
        },
    ).json()["id"]
    wait_state(api, job_id, {"RUNNING"}, 60)
    time.sleep(3)  # the agent reports a few times
    began = time.perf_counter()
    node.cut()
    wait_for(lambda: cs.swarm.states().get("sw3") == "down", 120, "down")
    down = time.perf_counter() - began
    wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["attempt"] == 1, 300, "requeue")
    requeued = time.perf_counter() - began
    node.heal()
    api.post(f"/v1/jobs/{job_id}/cancel")
    cs.heal(timeout=120)
    return {
        "grace_s": grace,
        "down_detected_s": round(down, 2),
        "requeued_s": round(requeued, 2),
        "beyond_grace_s": round(requeued - grace, 2),
    }


def agent_cost(cs: SwarmServer, idle: float) -> dict[str, Any]:
    """CPU share of one core and RSS of each agent over ``idle`` quiet seconds."""
    pids = {name: agent.proc.pid for name, agent in cs.agents.items() if agent.proc}
    before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(idle)
    per_node = {
        name: {
            "cpu_core_share": round((_cpu_seconds(pid) - before[name]) / idle, 4),
            "rss_mb": round(_rss_bytes(pid) / 2**20, 1),
        }
        for name, pid in pids.items()
    }
    return {
        "idle_s": idle,
        "max_cpu_core_share": max(v["cpu_core_share"] for v in per_node.values()),
        "max_rss_mb": max(v["rss_mb"] for v in per_node.values()),
        "nodes": per_node,
    }


def leader_death(cs: SwarmServer, home: Path, **swarm_options: Any) -> dict[str, Any]:
    """Kill the leader beside a follower; when does the follower lead, and place a job?"""
    leader = cs.server
    follower = ServerProcess(
        home,
        db_url=leader.db_url,
        emulate=None,
        config=fast_config(cs.swarm, **swarm_options),
        host=BRIDGE_ADDRESS,
        args=("--standby",),
    ).start()
    try:
        for agent in cs.agents.values():  # every agent reports to both replicas
            agent.stop()
            agent.server = f"{leader.url},{follower.url}"
            agent.start()
        cs.heal(timeout=120)
        headers = {"Authorization": f"Bearer {leader.admin_token}"}
        with httpx.Client(base_url=follower.url, headers=headers, timeout=30) as api:

            def leads() -> bool:
                return bool(api.get("/healthz").json()["role"] == "leader")

            leader.kill9()
            began = time.perf_counter()
            spec = {"image": IMAGE, "command": ["sleep", "1"], "gpus": 1}
            job_id = api.post("/v1/jobs", json=spec).json()["id"]
            wait_for(leads, 60, "the follower to lead")
            led = time.perf_counter() - began
            while api.get(f"/v1/jobs/{job_id}").json()["state"] not in ("RUNNING", "SUCCEEDED"):
                if time.perf_counter() - began > 120:
                    raise RuntimeError(f"job {job_id} not placed 120 s after the leader died")
                time.sleep(POLL)
            placed = time.perf_counter() - began
    finally:
        follower.stop()
    return {"leads_s": round(led, 2), "next_placement_s": round(placed, 2), "goal_s": 10.0}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--grace", type=float, default=20.0)
    parser.add_argument("--agent-interval", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="gpudock-swarm-bench-")  # kept on failure: the logs
    with (
        SwarmCluster() as swarm,
        fresh_database("gpudock_bench") as db,
        swarm_server(
            swarm, Path(tmp), db, node_grace=args.grace, agent_interval=args.agent_interval
        ) as cs,
    ):
        cs.heal(timeout=120)
        out = {
            "benchmark": "swarm",
            **build_info(),
            "nodes": len(swarm.nodes),
            "agent_interval_s": args.agent_interval,
            "submit_to_running": submit_to_running(cs, args.samples),
            "link_cut": link_cut(cs, args.grace),
            "agent": agent_cost(cs, args.idle),
            "leader_death": leader_death(
                cs,
                Path(tmp) / "follower",
                node_grace=args.grace,
                agent_interval=args.agent_interval,
            ),
        }
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        s, c, a = out["submit_to_running"], out["link_cut"], out["agent"]
        d = out["leader_death"]
        print(
            f"submit→running median {s['gpudock']['median_s']}s (bare service "
            f"{s['bare']['median_s']}s, ratio {s['ratio']}); link cut: down after "
            f"{c['down_detected_s']}s, requeued after {c['requeued_s']}s (grace {c['grace_s']}s);"
            f" agent: {a['max_cpu_core_share']:.2%} of a core, {a['max_rss_mb']} MB; leader"
            f" killed: a follower led after {d['leads_s']}s, placed after {d['next_placement_s']}s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
