"""A dockerd that one test owns, so it may ``kill -9`` and restart it.

Never the shared engine on ``/var/run/docker.sock``. The daemon runs in its
own network namespace (``nsenter --net``, as TESTING.md says; ``--bridge=none``
is safe there and only there), with its own ``--data-root``, ``--exec-root``,
``--pidfile``, socket and ``--cgroup-parent``. It starts its own containerd as
a child; ``kill9`` kills both, as a crash of the engine would. Containerd
shims are not children of either and survive, exactly as on a real host.

::

    with OwnDockerd("gpudock-faults") as engine:
        engine.url                 # unix:///tmp/gpudock-faults/docker.sock
        engine.kill9()             # dockerd and its containerd, SIGKILL
        engine.start()             # the same data and exec roots again
        engine.shims()             # {container id: shim pid} of live shims

``OwnDockerd(name, hook_log=path)`` starts it with the stand-in NVIDIA hook
(``tests/kit/fake_gpu_hook``) on its PATH, logging to ``path``: GPU device
requests work, and a container's ``FAKE_HOOK_DELAY`` holds its start in
runc's prestart hook, as a hook that hangs does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import docker.errors
from tests.kit.docker import CLIENT_TIMEOUT, TEST_IMAGE, docker_client, unavailable

HOOK_DIR = Path(__file__).resolve().parent / "fake_gpu_hook"


class OwnDockerd:
    """One private dockerd (see module docstring). Needs root, ``ip`` and ``nsenter``."""

    def __init__(
        self, name: str, *, live_restore: bool = False, hook_log: Path | None = None
    ) -> None:
        if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
            unavailable("a private dockerd needs root, ip and nsenter")
        if not shutil.which("dockerd"):
            unavailable("dockerd is not installed")
        self.name = name
        self.base = Path(f"/tmp/{name}")
        self.sock = self.base / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.live_restore = live_restore
        self.hook_log = hook_log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # ------------------------------------------------------------- lifecycle

    def __enter__(self) -> OwnDockerd:
        self.teardown()
        self.base.mkdir(parents=True)
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.start()
        with (
            contextlib.closing(self.client()) as own,
            contextlib.closing(docker_client()) as shared,
        ):
            own.images.load(b"".join(shared.images.get(TEST_IMAGE).save(named=True)))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.teardown()

    def start(self, timeout: float = 90.0) -> None:
        """Start the daemon (again) on the same roots; return once it answers ``/_ping``."""
        self._wait_gone()
        env = self.daemon_env()
        args = ["nsenter", f"--net=/run/netns/{self.name}", "dockerd", *self.daemon_args()]
        self.starts += 1
        with open(self.base / "dockerd.log", "ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                with contextlib.closing(self.client()) as client:
                    client.ping()
                return
            except (docker.errors.DockerException, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"private dockerd did not start:\n{self.log()[-1500:]}"
                    ) from None
                time.sleep(0.05)

    def daemon_args(self) -> list[str]:
        """dockerd's arguments; a subclass adds its own (labels, runtimes)."""
        args = ["--data-root", str(self.base / "data"), "--exec-root", str(self.base / "exec"),
                "--pidfile", str(self.base / "dockerd.pid"), "-H", self.url,
                "--cgroup-parent", self.name, "--bridge=none", "--iptables=false",
                "--ip-masq=false"]  # fmt: skip
        if self.live_restore:
            args.append("--live-restore")
        return args

    def daemon_env(self) -> dict[str, str]:
        """dockerd's environment: this process's, without the shared engine's stand-in hook."""
        env = {k: v for k, v in os.environ.items() if k != "GPUDOCK_FAKE_HOOK_LOG"}
        env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if "fake_gpu" not in p)
        if self.hook_log is not None:
            env["PATH"] = f"{HOOK_DIR}:{env['PATH']}"
            env["GPUDOCK_FAKE_HOOK_LOG"] = str(self.hook_log)
        return env

    def kill9(self) -> list[int]:
        """SIGKILL dockerd and the containerd it started; return the pids killed."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        pids = [self.proc.pid, *_children(self.proc.pid, "containerd")]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for pid in pids[1:]:  # reaped by init: a zombie still "runs" for dockerd's check
            if not _wait_pid_gone(pid, zombie_ok=False):
                (self.base / "exec" / "containerd" / "containerd.pid").unlink(missing_ok=True)
        return pids

    def teardown(self) -> None:
        """Remove every container, stop the daemon, delete the namespace, cgroups and roots."""
        if self.sock.exists() and (self.proc is None or self.proc.poll() is None):
            with (
                contextlib.suppress(docker.errors.DockerException, OSError),
                contextlib.closing(self.client()) as client,
            ):
                for summary in client.api.containers(all=True):
                    client.api.remove_container(summary["Id"], v=True, force=True)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        elif self.proc is None:
            _stop_stale(self.base / "dockerd.pid")
        for pid in self.shims().values():  # only shims under this daemon's own exec root
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        for cgroup in sorted(Path("/sys/fs/cgroup").glob(f"*/{self.name}/**/"), reverse=True):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        for cgroup in Path("/sys/fs/cgroup").glob(f"*/{self.name}"):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        _unmount_under(self.base)
        log = self.base / "dockerd.log"
        if log.exists():  # kept for a failed test's report
            shutil.copy(log, self.base.with_name(f"{self.name}.last-dockerd.log"))
        shutil.rmtree(self.base, ignore_errors=True)

    # --------------------------------------------------------------- queries

    def client(self) -> Any:
        return docker.DockerClient(base_url=self.url, timeout=CLIENT_TIMEOUT)

    def log(self) -> str:
        path = self.base / "dockerd.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def shims(self) -> dict[str, int]:
        """Live ``containerd-shim-runc-v2`` processes of this daemon: {container id: pid}.

        A shim is this daemon's when its command line names this daemon's
        containerd address (under ``--exec-root``); its ``-id`` is the container id.
        """
        marker = str(self.base / "exec")
        found: dict[str, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv if a]
            if not words or "containerd-shim" not in words[0]:
                continue
            if not any(marker in w for w in words) or "-id" not in words:
                continue
            found[words[words.index("-id") + 1]] = int(entry.name)
        return found

    def runc_inits(self) -> list[int]:
        """Pids of ``runc init`` processes whose parent is one of this daemon's shims."""
        shim_pids = set(self.shims().values())
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid in shim_pids and argv[:2] == [b"runc", b"init"]:
                out.append(int(entry.name))
        return out

    def _wait_gone(self) -> None:
        """A restarted daemon needs its old process gone (it holds the pidfile)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("the private dockerd is still running")


def children(ppid: int) -> list[tuple[int, list[str]]]:
    """(pid, argv) of each live child of ``ppid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == ppid:
            out.append((int(entry.name), [a.decode(errors="replace") for a in argv if a]))
    return out


def _children(ppid: int, comm: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name == comm and int(stat.rsplit(")", 1)[1].split()[1]) == ppid:
            out.append(int(entry.name))
    return out


def _wait_pid_gone(pid: int, timeout: float = 10.0, zombie_ok: bool = True) -> bool:
    """Wait until ``pid`` has exited (and, unless ``zombie_ok``, been reaped); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if zombie_ok and "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
            Path(f"/proc/{pid}/stat").stat()
        except OSError:
            return True
        time.sleep(0.02)
    return False


def _unmount_under(base: Path) -> None:
    """Lazily unmount everything the daemon mounted under ``base``, deepest first."""
    prefix = f"{base}/"
    points = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(prefix) or line.split()[1] == str(base)
    ]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _stop_stale(pid_file: Path) -> None:
    """A daemon left by an interrupted run (not our child): SIGTERM it and wait."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    _wait_pid_gone(pid, 20.0)
