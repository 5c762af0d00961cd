"""Helpers for tests against a real dockerd (see scripts/lib.sh and docs TESTING).

``scripts/lib.sh`` starts the default dockerd with the stand-in NVIDIA hook
(``tests/kit/fake_gpu_hook``) on its PATH and builds ``TEST_IMAGE``. Under
``CI=true`` a missing engine, image or hook fails the test; elsewhere it skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import pytest

TEST_IMAGE = "gpudock-test/busybox:latest"
HOOK_LOG = Path(os.environ.get("GPUDOCK_FAKE_HOOK_LOG", "/tmp/gpudock-fake-hook/hook.jsonl"))
CLIENT_TIMEOUT = 30


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def unavailable(reason: str) -> None:
    """``pytest.fail`` under ``CI=true`` (CI must run everything), else ``pytest.skip``."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: required)", pytrace=False)
    pytest.skip(f"{reason}; run scripts/test.sh to set it up")


def docker_client(base_url: str | None = None) -> Any:
    """A docker-py client that answers ``ping``; fail (CI) or skip if there is none."""
    try:
        if base_url is None:
            client = docker.from_env(timeout=CLIENT_TIMEOUT)
        else:
            client = docker.DockerClient(base_url=base_url, timeout=CLIENT_TIMEOUT)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        unavailable(f"Docker engine unreachable: {exc}")
    return client


def require_test_image(client: Any) -> None:
    """Fail (CI) or skip unless ``TEST_IMAGE`` exists (``build_test_image`` in lib.sh)."""
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"test image {TEST_IMAGE} is missing")


_gpu_driver_cache: dict[str, bool] = {}


def daemon_has_gpu_driver(client: Any) -> bool:
    """True if the engine accepts a GPU device request (probe with a throwaway container)."""
    key = str(client.api.base_url)
    if key not in _gpu_driver_cache:
        request = docker.types.DeviceRequest(device_ids=["GPU-probe"], capabilities=[["gpu"]])
        name = f"gpudock-probe-{uuid.uuid4().hex[:8]}"
        try:
            client.containers.run(
                TEST_IMAGE, ["true"], name=name, device_requests=[request], remove=True
            )
            _gpu_driver_cache[key] = True
        except docker.errors.APIError as exc:
            if "could not select device driver" not in str(exc):
                raise
            _gpu_driver_cache[key] = False
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(name, force=True)
    return _gpu_driver_cache[key]


def require_gpu_hook(client: Any) -> None:
    """Fail (CI) or skip unless dockerd runs with the stand-in NVIDIA hook."""
    if not daemon_has_gpu_driver(client):
        unavailable("dockerd has no NVIDIA device driver (start it with start_dockerd)")


def hook_log_entries(since_ts: float | None = None) -> list[dict[str, Any]]:
    """Records the stand-in hook appended to ``HOOK_LOG`` at or after ``since_ts``."""
    try:
        lines = HOOK_LOG.read_text().splitlines()
    except FileNotFoundError:
        return []
    entries = [json.loads(line) for line in lines if line.strip()]
    if since_ts is None:
        return entries
    return [e for e in entries if e["time"] >= since_ts]


@contextlib.contextmanager
def hook_fail_switch() -> Iterator[None]:
    """Make the stand-in hook fail every GPU container while inside the block.

    Global to the engine: concurrent tests' GPU containers fail too. Prefer a
    device id containing ``FAIL``, which fails only that container.
    """
    switch = HOOK_LOG.parent / "fail"
    switch.touch()
    try:
        yield
    finally:
        switch.unlink(missing_ok=True)


def cleanup_containers(client: Any, label_filter: str) -> int:
    """Force-remove every container matching ``label_filter`` (``key=value``); return count."""
    removed = 0
    for summary in client.api.containers(all=True, filters={"label": label_filter}):
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(summary["Id"], v=True, force=True)
            removed += 1
    return removed


def unique_instance_id() -> str:
    """A gpudock instance id no other test uses, so label filters isolate tests."""
    return f"test-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def spare_dockerd(name: str = "gpudock-nohook") -> Iterator[str]:
    """A second, plain dockerd (no NVIDIA hook) in its own network namespace.

    Yields its ``unix://`` URL; it has ``TEST_IMAGE`` loaded. Emulates a user's
    machine without the NVIDIA container toolkit. Needs root, ``ip`` and
    ``nsenter``; fails (CI) or skips without them. Torn down on exit: its
    containers, the daemon, the namespace and its cgroups.
    """
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        unavailable("a spare dockerd needs root, ip and nsenter")
    base = Path(f"/tmp/{name}")
    sock = base / "docker.sock"
    _teardown_spare(name, base)
    base.mkdir(parents=True)
    subprocess.run(["ip", "netns", "add", name], check=True)
    env = {k: v for k, v in os.environ.items() if k != "GPUDOCK_FAKE_HOOK_LOG"}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if "fake_gpu_hook" not in p)
    with open(base / "dockerd.log", "wb") as log:
        daemon = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{name}", "dockerd",
             "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
             "--pidfile", str(base / "dockerd.pid"), "-H", f"unix://{sock}",
             "--cgroup-parent", name, "--bridge=none", "--iptables=false", "--ip-masq=false"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        url = f"unix://{sock}"
        with (
            contextlib.closing(_wait_for_daemon(url, base)) as spare,
            contextlib.closing(docker_client()) as main,
        ):
            spare.images.load(b"".join(main.images.get(TEST_IMAGE).save(named=True)))
        yield url
    finally:
        _teardown_spare(name, base, daemon)


def _wait_for_daemon(url: str, base: Path, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = docker.DockerClient(base_url=url, timeout=CLIENT_TIMEOUT)
            client.ping()
            return client
        except (docker.errors.DockerException, OSError):
            if time.monotonic() > deadline:
                log_tail = (base / "dockerd.log").read_text()[-2000:]
                raise RuntimeError(f"spare dockerd did not start:\n{log_tail}") from None
            time.sleep(0.1)


def _teardown_spare(name: str, base: Path, daemon: subprocess.Popen[bytes] | None = None) -> None:
    sock = base / "docker.sock"
    if sock.exists():
        with contextlib.suppress(docker.errors.DockerException, OSError):
            client = docker.DockerClient(base_url=f"unix://{sock}", timeout=CLIENT_TIMEOUT)
            with contextlib.closing(client):
                for summary in client.api.containers(all=True):
                    client.api.remove_container(summary["Id"], v=True, force=True)
    if daemon is not None:
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    else:  # left over from an earlier, interrupted run: not our child
        _stop_stale_daemon(base / "dockerd.pid")
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    cgroup_root = Path("/sys/fs/cgroup")
    for cgroup in [*cgroup_root.glob(f"*/{name}"), cgroup_root / name]:
        with contextlib.suppress(OSError):
            cgroup.rmdir()
    _unmount_below(base)
    shutil.rmtree(base, ignore_errors=True)
    if base.exists():
        raise RuntimeError(f"could not remove the spare dockerd's folder {base}")


def _unmount_below(base: Path) -> None:
    """Detach every mount at or below ``base``, deepest first.

    dockerd bind-mounts its data root onto itself when the host's root mount is
    not shared; a daemon that had to be killed leaves that mount behind, and
    the folder cannot be removed while it exists.
    """
    prefix = str(base)
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _stop_stale_daemon(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        if "\nState:\tZ" in status:
            return
        time.sleep(0.1)
