"""``WS /v1/jobs/{id}/exec/tty`` on a real server and dockerd, driven by a WebSocket client."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, submit, wait_for, wait_state
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.docker


@pytest.fixture
def server(make_server: Any) -> ServerProcess:
    return make_server().start()  # type: ignore[no-any-return]


def open_tty(
    server: ServerProcess, job: int | str, token: str | None, *command: str, **query: Any
) -> ClientConnection:
    params = urlencode([("command", c) for c in command] + list(query.items()))
    url = server.url.replace("http://", "ws://") + f"/v1/jobs/{job}/exec/tty?{params}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return connect(url, additional_headers=headers, open_timeout=30, legacy=True)


def until_exit(ws: ClientConnection) -> tuple[bytes, dict[str, Any]]:
    """Every output byte, and the final control frame."""
    output = b""
    for frame in ws:
        if isinstance(frame, bytes):
            output += frame
        else:
            return output, json.loads(frame)
    raise AssertionError(f"closed without an exit frame after {output!r}")


def until_seen(ws: ClientConnection, text: bytes) -> bytes:
    output = b""
    while text not in output:
        frame = ws.recv(timeout=30)
        assert isinstance(frame, bytes), frame
        output += frame
    return output


def refusal(server: ServerProcess, job: int | str, token: str | None, *command: str) -> Any:
    with pytest.raises(InvalidStatus) as caught:
        open_tty(server, job, token, *command).close()
    response = caught.value.response
    return response.status_code, json.loads(response.body or b"{}")["error"]["message"]


def running_job(server: ServerProcess, token: str) -> int:
    job = submit(server.api(token), image=TEST_IMAGE, command=["sleep", "300"], gpus=1)
    wait_state(server.api(), job, {"RUNNING"})
    return job


def test_the_owner_types_into_a_shell_resizes_it_and_gets_its_exit_code(
    server: ServerProcess,
) -> None:
    alice = server.cli("token", "create", "--user", "alice").stdout.strip()
    job = running_job(server, alice)

    with open_tty(server, job, alice, "sh", rows=30, cols=90) as ws:
        ws.send(b"stty size\r")
        assert b"30 90" in until_seen(ws, b"30 90")
        ws.send(json.dumps({"resize": [41, 123]}))
        ws.send(b"stty size; echo $((6*7)); exit 3\r")
        output, end = until_exit(ws)

    assert b"41 123" in output and b"42" in output
    assert end == {"exit": 3}


def test_only_the_owner_of_a_running_job_gets_a_tty(server: ServerProcess) -> None:
    alice = server.cli("token", "create", "--user", "alice").stdout.strip()
    bob = server.cli("token", "create", "--user", "bob").stdout.strip()
    job = running_job(server, alice)

    assert refusal(server, job, bob, "sh") == (404, f"job {job} not found")
    assert refusal(server, job, server.admin_token, "sh") == (
        403,
        f"only the job's owner (alice) may run commands in job {job}",
    )
    assert refusal(server, job, None, "sh")[0] == 401
    assert refusal(server, job, alice) == (422, "command: required, one ?command= per argument")
    assert refusal(server, "x1", alice, "sh") == (422, "job_id: 'x1' is not a job id")
    server.cli("cancel", str(job))
    assert refusal(server, job, alice, "sh") == (
        409,
        f"job {job} is CANCELLED; exec needs a RUNNING job",
    )


def test_a_client_that_leaves_hangs_up_the_command_and_what_it_started(
    server: ServerProcess, docker: Any
) -> None:
    job = running_job(server, server.admin_token)
    container = docker.containers.get(server.api().get(f"/v1/jobs/{job}").json()["container"])

    with open_tty(server, job, server.admin_token, "sh") as ws:
        ws.send(b"sleep 1234 & sleep 4321\r")
        until_seen(ws, b"sleep 4321")
        wait_for(lambda: "4321" in str(container.top()), 10, "the sleeps to start")

    wait_for(lambda: "1234" not in str(container.top()), 15, "the shell's children to end")
    assert "4321" not in str(container.top()) and "sleep 300" in str(container.top())


def test_a_malformed_control_frame_closes_with_a_policy_reason(server: ServerProcess) -> None:
    job = running_job(server, server.admin_token)

    with open_tty(server, job, server.admin_token, "sh") as ws:
        ws.send(json.dumps({"resize": [0, 80]}))
        with pytest.raises(ConnectionClosedError):
            until_exit(ws)

    assert ws.close_code == 1008
    assert ws.close_reason == "resize: rows and cols must be integers from 1 to 10000"
