"""The HA control plane on a real swarm: ``kill -9`` of the leader while jobs are placed.

The session's Swarm server leads; a ``--standby`` server on its database follows
and serves the API, and every agent reports to both (``--server A,B``). Jobs are
submitted through the follower, more than there are GPUs, and the leader is
killed while they are placed: the follower leads within 10 s, every job ends
``SUCCEEDED`` in its first attempt, and no GPU was in two containers at once
(from the nodes' stand-in runtime). Afterwards the session's server leads again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.kit.server import TERMINAL, ServerProcess, submit, wait_for, wait_state
from tests.kit.swarm import BRIDGE_ADDRESS, SwarmCluster
from tests.kit.swarm_server import SwarmServer, fast_config

IMAGE = "gpudock-test/busybox:latest"
TAKEOVER_S = 10.0


def role(server: ServerProcess) -> str:
    return str(httpx.get(server.url + "/healthz", timeout=5).json()["role"])


def report_to(cs: SwarmServer, servers: str) -> None:
    """Restart every agent reporting to ``servers`` (one URL, or several)."""
    for agent in cs.agents.values():
        agent.stop()
        agent.server = servers
        agent.start()


@pytest.fixture
def follower(swarm_cluster: SwarmServer, tmp_path: Path) -> Iterator[ServerProcess]:
    """A follower of the session's server, on its database; afterwards the session's
    server is brought back (as a standby, then leading once the follower stops)."""
    cs = swarm_cluster
    cs.heal()
    leader = cs.server
    standby = ServerProcess(
        tmp_path / "follower",
        db_url=leader.db_url,
        emulate=None,
        config=fast_config(cs.swarm),
        host=BRIDGE_ADDRESS,
        args=("--standby",),
    ).start()
    report_to(cs, f"{leader.url},{standby.url}")
    try:
        yield standby
    finally:
        if leader.proc is None or leader.proc.poll() is not None:
            leader.args = ("--standby",)
            leader.start()
            leader.args = ()
        standby.stop()
        wait_for(lambda: role(leader) == "leader", 30, "the session's server to lead again")
        report_to(cs, leader.url)
        cs.heal()
        cs.cancel_unfinished()


def _held(swarm: SwarmCluster, job: int) -> list[tuple[str, float, float]]:
    """(GPU, start, end) of each container the runtime created for ``job``."""
    lives = swarm.lives()
    creates = [r for r in swarm.runtime_log() if r["op"] == "create" and r.get("job") == str(job)]
    return [
        (gpu, *lives[c["container_id"]])
        for c in creates
        if c["container_id"] in lives
        for gpu in c["devices"]
    ]


def test_the_follower_takes_over_a_leader_killed_while_jobs_are_placed(
    swarm_cluster: SwarmServer, follower: ServerProcess
) -> None:
    cs, leader = swarm_cluster, swarm_cluster.server
    assert (role(leader), role(follower)) == ("leader", "follower")
    headers = {"Authorization": f"Bearer {leader.admin_token}"}
    gpus = sum(len(n.gpus) for n in cs.swarm.nodes)
    with httpx.Client(base_url=follower.url, headers=headers, timeout=30) as api:
        ids = [
            submit(api, image=IMAGE, command=["sleep", "2"], gpus=1, retries=0)
            for _ in range(gpus + 3)
        ]
        leader.kill9()
        killed = time.monotonic()
        wait_for(lambda: role(follower) == "leader", TAKEOVER_S + 20, "the follower to lead")
        took = time.monotonic() - killed
        assert took <= TAKEOVER_S, f"the follower took {took:.1f} s to take over"
        jobs = [wait_state(api, i, TERMINAL, 120) for i in ids]
    assert {j["state"] for j in jobs} == {"SUCCEEDED"}, [(j["id"], j["reason"]) for j in jobs]
    assert {j["attempt"] for j in jobs} == {0}, "a job was started again"
    held = [h for j in jobs for h in _held(cs.swarm, j["id"])]
    assert len(held) == len(jobs), "one container per job"
    for gpu, start, end in held:
        overlapping = [h for h in held if h[0] == gpu and h[1] < end and start < h[2]]
        assert len(overlapping) == 1, f"GPU {gpu} in two containers at once: {overlapping}"
