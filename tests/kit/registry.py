"""A real private image registry for tests: Debian's ``docker-registry`` (the CNCF
distribution registry) on ``127.0.0.1:<free port>`` with htpasswd (bcrypt) logins.

Docker treats registries on 127.0.0.0/8 as insecure, so plain HTTP works without
TLS or daemon flags. ``push`` logs in through ``auth_config`` on the push itself
(never ``client.login``, which would keep the login in the shared client and let
later anonymous pulls use it).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import httpx
from tests.kit.docker import unavailable
from tests.kit.server import free_port

START_TIMEOUT = 20.0


@dataclass
class PrivateRegistry:
    host: str  # 127.0.0.1:PORT
    proc: subprocess.Popen[bytes]
    log_path: Path

    def ref(self, repository: str) -> str:
        """``HOST/repository`` (``repository`` with its tag)."""
        return f"{self.host}/{repository}"

    def push(self, client: Any, local: str, repository: str, user: str, password: str) -> str:
        """Tag ``local`` as ``HOST/repository``, push it as ``user``, then drop the local
        tag, so that a job needs a pull to get it. Returns the reference."""
        ref = self.ref(repository)
        name, _, tag = ref.rpartition(":")
        client.images.get(local).tag(name, tag)
        auth = {"username": user, "password": password}
        for message in client.api.push(name, tag=tag, stream=True, decode=True, auth_config=auth):
            if isinstance(message, dict) and message.get("error"):
                raise AssertionError(f"push of {ref} failed: {message['error']}")
        self.forget(client, ref)
        return ref

    def forget(self, client: Any, ref: str) -> None:
        """Remove the engine's tag ``ref`` (the image stays under its other names)."""
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_image(ref)


def registry_binary() -> str:
    """The registry program; fail (CI) or skip if it is not installed."""
    found = shutil.which("docker-registry") or shutil.which("registry")
    if found is None:
        unavailable("docker-registry is not installed (apt-get install docker-registry)")
    assert found is not None
    return found


def htpasswd_lines(users: dict[str, str]) -> str:
    """bcrypt htpasswd entries (the registry accepts only bcrypt) from apache2-utils."""
    if shutil.which("htpasswd") is None:
        unavailable("htpasswd is not installed (apt-get install apache2-utils)")
    lines = []
    for user, password in users.items():
        done = subprocess.run(
            ["htpasswd", "-niB", user], input=password, capture_output=True, text=True, check=True
        )
        lines.append(done.stdout.strip())
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def private_registry(root: Path, users: dict[str, str]) -> Iterator[PrivateRegistry]:
    """A running registry whose every request needs one of ``users``' logins."""
    binary = registry_binary()
    root.mkdir(parents=True, exist_ok=True)
    (root / "htpasswd").write_text(htpasswd_lines(users))
    host = f"127.0.0.1:{free_port()}"
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: info}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
        f"http: {{addr: '{host}'}}\n"
        f"auth: {{htpasswd: {{realm: gpudock-test, path: {root / 'htpasswd'}}}}}\n"
    )
    log_path = root / "registry.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT
        )
    registry = PrivateRegistry(host, proc, log_path)
    try:
        _wait_ready(registry)
        yield registry
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(registry: PrivateRegistry) -> None:
    """Until ``/v2/`` answers 401 (up, and asking for a login)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if registry.proc.poll() is not None:
            raise AssertionError(f"registry exited: {registry.log_path.read_text()[-2000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://{registry.host}/v2/", timeout=1).status_code == 401:
                return
        time.sleep(0.05)
    raise AssertionError(f"registry not ready after {START_TIMEOUT}s")
