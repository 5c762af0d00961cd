"""A dead token ends what it opened, within a second: revoked, or expired.

One server and one running job of alice's. Each test opens, with one token
of hers, every long-lived request there is: ``gpudock logs -f``, ``gpudock
exec`` (a streaming command), an ``exec -it`` WebSocket, ``gpudock events
-f`` and the dashboard's session stream. Then the token dies, and each must
end within 1 s, saying why; the ``exec -it`` shell's processes are hung up.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, gpudock_bin, submit, wait_for, wait_state
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = pytest.mark.docker
WITHIN = 1.0  # seconds from the token's death to the end of each session


@dataclass
class Lab:
    server: ServerProcess
    job: int
    container: Any  # docker-py Container


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, docker: Any) -> Iterator[Lab]:
    server = ServerProcess(tmp_path_factory.mktemp("sessions") / "home").start()
    try:
        alice = token_for(server, "alice")["token"]
        job = submit(
            server.api(alice),
            image=TEST_IMAGE,
            command=["sh", "-c", "echo started; sleep 300"],
            gpus=1,
        )
        wait_state(server.api(), job, {"RUNNING"})
        container = docker.containers.get(server.api().get(f"/v1/jobs/{job}").json()["container"])
        yield Lab(server, job, container)
    finally:
        teardown(server, docker)


def token_for(server: ServerProcess, user: str, expires: str | None = None) -> dict[str, Any]:
    with server.api() as api:
        response = api.post("/v1/tokens", json={"user": user, "expires": expires})
    response.raise_for_status()
    created: dict[str, Any] = response.json()
    return created


@dataclass
class Session:
    """One long-lived request, watched by a thread: when it ended and its last words."""

    name: str
    opened: threading.Event = field(default_factory=threading.Event)
    ended_at: float | None = None
    said: str = ""


class Sessions:
    """Every kind of long-lived request, opened with one token."""

    def __init__(self, lab: Lab, token: str) -> None:
        self.lab, self.token = lab, token
        self.all: list[Session] = []
        self._threads: list[threading.Thread] = []

    def open(self) -> None:
        starts: list[tuple[str, Callable[[Session], None]]] = [
            ("logs -f", self._logs),
            ("exec", self._exec),
            ("exec -it", self._tty),
            ("events -f", self._events),
            ("dashboard", self._dashboard),
        ]
        for name, run in starts:
            session = Session(name)
            self.all.append(session)
            thread = threading.Thread(target=self._watch, args=(run, session), daemon=True)
            thread.start()
            self._threads.append(thread)
        for session in self.all:
            assert session.opened.wait(30), f"{session.name} did not open"

    def wait_ended(self) -> None:
        for thread in self._threads:
            thread.join(timeout=20)

    @staticmethod
    def _watch(run: Callable[[Session], None], session: Session) -> None:
        try:
            run(session)
        except Exception as exc:  # recorded: the assertions name it
            session.said = f"{session.said} [{type(exc).__name__}: {exc}]"
        finally:
            session.ended_at = time.time()
            session.opened.set()

    def _cli(self, session: Session, *args: str, ready: str) -> None:
        server = self.lab.server
        env = {**server.env, "GPUDOCK_URL": server.url, "GPUDOCK_TOKEN": self.token}
        process = subprocess.Popen(
            [gpudock_bin(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        out = ""
        for line in process.stdout:
            out += line
            if ready in line:
                session.opened.set()
        code = process.wait(timeout=30)
        session.said = f"exit {code}; stdout {out[-200:]!r}; stderr {process.stderr.read()!r}"

    def _logs(self, session: Session) -> None:
        self._cli(session, "logs", "-f", str(self.lab.job), ready="started")

    def _exec(self, session: Session) -> None:
        command = ["exec", str(self.lab.job), "sh", "-c", "echo go; sleep 60"]
        self._cli(session, *command, ready="go")

    def _events(self, session: Session) -> None:
        self._cli(session, "events", "-f", "--job", str(self.lab.job), ready="RUNNING")

    def _tty(self, session: Session) -> None:
        query = urlencode([("command", "sh")])
        url = self.lab.server.url.replace("http://", "ws://")
        with connect(
            f"{url}/v1/jobs/{self.lab.job}/exec/tty?{query}",
            additional_headers={"Authorization": f"Bearer {self.token}"},
            open_timeout=30,
            legacy=True,
        ) as ws:
            ws.send(b"sleep 4242\r")
            seen = b""
            try:
                while True:
                    frame = ws.recv(timeout=30)
                    if isinstance(frame, bytes):
                        seen += frame
                        if b"sleep 4242" in seen:
                            session.opened.set()
            except ConnectionClosed:
                session.said = f"close {ws.close_code} {ws.close_reason}"

    def _dashboard(self, session: Session) -> None:
        cookies = {"gpudock_token": self.token}
        with (
            httpx.Client(base_url=self.lab.server.url, cookies=cookies, timeout=30) as client,
            client.stream("GET", "/ui/api/session") as response,
        ):
            assert response.status_code == 200, response.read()
            session.opened.set()
            for line in response.iter_lines():
                if line.startswith(("event:", "data:")):
                    session.said += line + " "


def assert_ended_with(sessions: Sessions, died_at: float, why: str) -> None:
    """Every session ended within ``WITHIN`` s of ``died_at`` and said ``why``."""
    late = {s.name: s.ended_at - died_at for s in sessions.all if s.ended_at is not None}
    assert all(s.ended_at is not None for s in sessions.all), [s.said for s in sessions.all]
    assert max(late.values()) <= WITHIN, late
    said = {s.name: s.said for s in sessions.all}
    assert said["logs -f"].startswith("exit 1;") and f"stream ended: {why}" in said["logs -f"]
    assert f"error: session ended: {why}" in said["exec"]
    assert said["exec -it"] == f"close 1008 {why}"
    assert said["events -f"].startswith("exit 1;") and why in said["events -f"]
    assert said["dashboard"] == f'event: ended data: {{"reason": "{why}"}} '


def assert_hung_up(lab: Lab) -> None:
    wait_for(lambda: "4242" not in str(lab.container.top()), 10, "the tty's shell to hang up")
    assert "sleep 300" in str(lab.container.top())  # the job itself runs on


def test_revoking_a_token_ends_every_session_it_opened_within_a_second(lab: Lab) -> None:
    created = token_for(lab.server, "alice")
    sessions = Sessions(lab, created["token"])
    sessions.open()
    with lab.server.api() as api:
        api.delete(f"/v1/tokens/{created['id']}").raise_for_status()
    revoked_at = time.time()
    sessions.wait_ended()
    assert_ended_with(sessions, revoked_at, "token revoked")
    assert_hung_up(lab)


def test_an_expiring_token_ends_every_session_it_opened_within_a_second(lab: Lab) -> None:
    created = token_for(lab.server, "alice", expires="5s")
    sessions = Sessions(lab, created["token"])
    sessions.open()
    assert time.time() < created["expires_at"], "opening took longer than the token lived"
    sessions.wait_ended()
    assert min(s.ended_at or 0 for s in sessions.all) >= created["expires_at"] - 0.05
    assert_ended_with(sessions, created["expires_at"], "token expired")
    assert_hung_up(lab)


def test_a_revocation_written_by_another_process_ends_the_session_too(lab: Lab) -> None:
    """The watch reads the database, not this process's memory: a revocation written
    there by another process (here: SQL from the test, as a second server process
    sharing the database would) ends the session all the same."""
    from sqlalchemy import create_engine, text

    created = token_for(lab.server, "alice")
    sessions = Sessions(lab, created["token"])
    opened = Session("dashboard")
    sessions.all.append(opened)
    thread = threading.Thread(target=sessions._watch, args=(sessions._dashboard, opened))
    thread.start()
    assert opened.opened.wait(30)
    engine = create_engine(f"sqlite:///{lab.server.home / 'gpudock.db'}")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE tokens SET revoked_at = :now WHERE id = :id"),
            {"now": time.time(), "id": created["id"]},
        )
    engine.dispose()
    revoked_at = time.time()
    thread.join(timeout=20)
    assert opened.ended_at is not None and opened.ended_at - revoked_at <= WITHIN
    assert '"reason": "token revoked"' in opened.said
