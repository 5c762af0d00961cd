"""Whose fault a Docker error is, on strings captured from a real dockerd."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpudock.executors.errors import Fault, classify

CAPTURED: list[dict[str, Any]] = json.loads(
    (Path(__file__).with_name("docker_errors.json")).read_text()
)["cases"]


@pytest.mark.parametrize("case", CAPTURED, ids=[c["case"] for c in CAPTURED])
def test_a_captured_error_is_blamed_on_the_party_that_caused_it(case: dict[str, Any]) -> None:
    assert classify(case["message"], case["status"]) is Fault(case["fault"])


def test_the_captures_cover_both_parties_and_the_crash_of_issue_28() -> None:
    faults = {c["fault"] for c in CAPTURED}
    assert faults == {"job", "engine"}
    assert any("already exists" in c["message"] for c in CAPTURED)


def test_http_500_alone_does_not_make_it_the_engines_fault() -> None:
    assert classify("Cannot mkdir: /bin/sh is not a directory", 500) is Fault.JOB
    assert classify("task 0123456789abcdef: already exists", 500) is Fault.ENGINE


def test_an_unknown_error_is_the_jobs_so_it_cannot_requeue_forever() -> None:
    assert classify("something nobody has seen before", 500) is Fault.JOB
    assert classify("something nobody has seen before", None) is Fault.JOB


def test_a_job_pattern_wins_over_an_engine_pattern_in_one_message() -> None:
    message = (
        "failed to create shim task: OCI runtime create failed: unable to start container "
        'process: exec: "x": executable file not found in $PATH: context canceled'
    )
    assert classify(message, 400) is Fault.JOB


@pytest.mark.parametrize(
    "message",
    [
        "context canceled",
        "Docker engine unreachable while launching gpudock-x-1-a0: connection reset by peer",
        'connection error: desc = "transport: error while dialing: dial unix '
        '/run/docker/containerd/containerd.sock: connect: connection refused": unavailable',
    ],
)
def test_the_engine_going_away_is_the_engines_fault(message: str) -> None:
    assert classify(message) is Fault.ENGINE


def test_a_shim_bundle_left_by_a_crash_is_the_engines_fault() -> None:
    """Seen in the engine-crash test (gpudock's short form; the middle of the path elided)."""
    message = (
        "failed to start shim: mkdir /tmp/gpudock-crash/exec/containerd/daemon/"
        "io.containerd.runtime.v2.task/moby/b1c4052a84b463ff9cb0ef45d4d9fa828db3dba93f4c515a"
        "291e3ffa00d52f4d: file exists"
    )
    assert classify(message, 500) is Fault.ENGINE


def test_service_unavailable_is_the_engines_fault() -> None:
    assert classify("busy", 503) is Fault.ENGINE
