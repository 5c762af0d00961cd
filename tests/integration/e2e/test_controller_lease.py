"""One controller per database (``runtime/lease.py``), through ``gpudock server``.

A second server on a database whose controller runs is refused in one line that
names the first; ``--standby`` waits instead, and takes over when the leader is
killed: on PostgreSQL (the multi-host store) within 10 s, adopting the running
job's container, which the new controller then stops on cancel. While it waits,
a standby on PostgreSQL is a follower: it serves the API (``/healthz`` says
``follower``), and a job submitted through it wakes the leader at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_for, wait_state

pytestmark = pytest.mark.docker

TAKEOVER_S = 10.0


def test_a_second_server_on_the_database_is_refused_naming_the_first(
    make_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'gpudock.db'}"
    first = make_server(db_url=url).start()
    assert first.proc is not None
    second = make_server(db_url=url).start(wait=False)
    assert second.proc is not None
    assert second.proc.wait(timeout=60) == 2
    said = second.log().strip().splitlines()[-1]
    assert said.startswith(
        "error: another gpudock server runs the controller of this database "
        f"(pid {first.proc.pid} on "
    ), said
    assert said.endswith("start this one with --standby to take over when it stops"), said
    assert httpx.get(first.url + "/healthz").status_code == 200  # the first is untouched


def role(server: ServerProcess) -> str:
    return str(httpx.get(server.url + "/healthz", timeout=5).json()["role"])


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_follower_serves_the_api_then_takes_over_a_killed_leader_and_keeps_its_job(
    make_server: Callable[..., ServerProcess], db_url: str
) -> None:
    slow = {**FAST_CONFIG, "schedule_interval": "120s"}  # only a wake-up places a job soon
    leader = make_server(db_url=db_url, config=slow).start()
    follower = make_server(db_url=db_url, config=slow, args=("--standby",)).start()
    assert "standby: the controller of this database is" in follower.log()
    assert (role(leader), role(follower)) == ("leader", "follower")
    headers = {"Authorization": f"Bearer {leader.admin_token}"}
    with httpx.Client(base_url=follower.url, headers=headers, timeout=30) as api:
        running = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=1)
        submitted = time.monotonic()
        wait_state(api, running, {"RUNNING"}, timeout=60)
        woke = time.monotonic() - submitted
        assert woke < 60, f"the leader placed the follower's job after {woke:.1f} s"
        leader.kill9()
        killed = time.monotonic()
        wait_for(lambda: role(follower) == "leader", TAKEOVER_S + 20, "the follower to lead")
        took = time.monotonic() - killed
        assert took <= TAKEOVER_S, f"the follower took {took:.1f} s to take over"
        assert "took over as the controller of this database" in follower.log()
        time.sleep(2)  # a reconcile pass of the new controller: the container is adopted
        job = api.get(f"/v1/jobs/{running}").json()
        assert (job["state"], job["attempt"]) == ("RUNNING", 0), job
        assert api.post(f"/v1/jobs/{running}/cancel").status_code == 200
        wait_state(api, running, {"CANCELLED"}, timeout=60)
        after = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
        wait_state(api, after, {"SUCCEEDED"}, timeout=60)
