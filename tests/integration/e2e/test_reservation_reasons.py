"""A job blocked by an EASY reservation says so, and ``GET /v1/gpus`` shows the reservation.

Four emulated GPUs on the real dockerd: job ``running`` holds two for at
most 5 minutes; ``big`` needs all four and may not preempt, so it gets the
reservation, which holds the two idle GPUs; ``small`` (one GPU, no
``max_runtime``) would fit on them, and is told they are reserved for
``big``, with ``big``'s expected start in the server's local time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker


def ranges(indices: list[int]) -> str:
    first, last = min(indices), max(indices)
    assert sorted(indices) == list(range(first, last + 1)), indices
    return str(first) if first == last else f"{first}-{last}"


def test_a_job_blocked_by_a_reservation_names_it_and_gpus_shows_it(make_server: Any) -> None:
    server = make_server(env={"TZ": "UTC"}).start()
    api = server.api()
    sleep = {"image": TEST_IMAGE, "command": ["sleep", "300"]}
    running = submit(api, **sleep, gpus=2, max_runtime="5m")
    started = wait_state(api, running, {"RUNNING"})
    big = submit(api, **sleep, gpus=4)
    small = submit(api, **sleep, gpus=1)

    def reserved() -> list[dict[str, Any]]:
        gpus: list[dict[str, Any]] = api.get("/v1/gpus").json()
        return [g for g in gpus if g["reserved_for"] is not None]

    gpus = wait_for(lambda: len(reserved()) == 4 and reserved(), 30, "4 reserved GPUs")
    eta = started["started_at"] + 300
    assert {(g["reserved_for"]["job"], g["reserved_for"]["eta"]) for g in gpus} == {(big, eta)}
    idle = [g["index"] for g in gpus if g["exclusive_job"] is None]
    node = gpus[0]["node"]
    clock = time.strftime("%H:%M", time.gmtime(eta))
    expected = (
        f"GPUs {ranges(idle)} of {node} are reserved for job {big} (expected to start ≈ {clock})"
    )
    reasons = wait_for(lambda: job_state(api, small)["pending_reasons"], 30, "a reason")
    assert (reasons[0]["layer"], reasons[0]["message"]) == ("priority", expected)
    assert job_state(api, small)["state"] == "PENDING"
    assert job_state(api, big)["pending_reasons"][-1]["message"] == (
        f"next in line: GPUs 0-3 of {node} are reserved for it"
    )

    token = server.api().post("/v1/tokens", json={"user": "bob"}).json()["token"]
    shown = [g["reserved_for"] for g in server.api(token).get("/v1/gpus").json()]
    assert shown == [{"job": None, "user": None, "eta": eta}] * 4  # bob sees "another job"
    table = server.cli("gpus", token=token).stdout
    assert table.count("another job (≈ ") == 4 and f"job {big}" not in table
