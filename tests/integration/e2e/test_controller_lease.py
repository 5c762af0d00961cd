"""One controller per database (``runtime/lease.py``), through ``gpudock server``.

A second server on a database whose controller runs is refused in one line that
names the first; ``--standby`` waits instead, and takes over when the leader is
killed: on PostgreSQL (the multi-host store) within 10 s, adopting the running
job's container, which the new controller then stops on cancel.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, submit, wait_for, wait_state

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


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_standby_takes_over_a_killed_leader_and_keeps_its_running_job(
    make_server: Callable[..., ServerProcess], db_url: str
) -> None:
    leader = make_server(db_url=db_url).start()
    standby = make_server(db_url=db_url, args=("--standby",)).start(wait=False)
    wait_for(lambda: "standby: the controller of this database is" in standby.log(), 60, "wait")
    api = leader.api()
    running = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=1)
    wait_state(api, running, {"RUNNING"})
    leader.kill9()
    killed = time.monotonic()
    standby.wait_healthy(timeout=TAKEOVER_S + 20)
    took = time.monotonic() - killed
    assert took <= TAKEOVER_S, f"the standby took {took:.1f} s to take over"
    assert "took over as the controller of this database" in standby.log()
    with httpx.Client(
        base_url=standby.url, headers={"Authorization": f"Bearer {leader.admin_token}"}
    ) as new:
        time.sleep(2)  # a reconcile pass of the new controller: the container is adopted
        job = new.get(f"/v1/jobs/{running}").json()
        assert (job["state"], job["attempt"]) == ("RUNNING", 0), job
        assert new.post(f"/v1/jobs/{running}/cancel").status_code == 200
        wait_state(new, running, {"CANCELLED"}, timeout=60)
        after = submit(new, image=TEST_IMAGE, command=["true"], gpus=1)
        wait_state(new, after, {"SUCCEEDED"}, timeout=60)
