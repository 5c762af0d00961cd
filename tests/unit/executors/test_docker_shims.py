"""Which forgotten containerd shims gpudock reaps: its own, forgotten, running nothing.

A /proc-shaped folder stands in for the process table (``stat``, ``cmdline``,
and ``cwd`` linking to the shim's bundle with its ``config.json``); the real
thing is exercised by ``tests/integration/e2e/test_engine_crash.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudock.executors._docker_shims import ShimReaper, processes, shim_container

OURS, THEIRS = "inst-ours", "inst-theirs"


class FakeProc:
    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, ppid: int, argv: list[str], instance: str | None = None) -> None:
        entry = self.root / str(pid)
        entry.mkdir(parents=True)
        (entry / "stat").write_text(f"{pid} ({argv[0][-15:]}) S {ppid} 1 1 0 -1 0")
        (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        if instance is not None:
            bundle = self.root / "bundles" / str(pid)
            bundle.mkdir(parents=True)
            env = ["PATH=/bin", f"GPUDOCK_INSTANCE={instance}", "GPUDOCK_JOB_ID=7"]
            (bundle / "config.json").write_text(json.dumps({"process": {"env": env}}))
            (entry / "cwd").symlink_to(bundle)

    def shim(self, pid: int, container: str, instance: str, namespace: str = "moby") -> None:
        argv = ["/usr/bin/containerd-shim-runc-v2", "-namespace", namespace, "-id", container,
                "-address", "/run/docker/containerd/containerd.sock"]  # fmt: skip
        self.add(pid, 1, argv, instance)


def test_only_our_forgotten_shims_that_run_nothing_are_killed(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.shim(100, "a" * 64, OURS)  # forgotten, nothing under it
    proc.shim(200, "b" * 64, OURS)  # forgotten, a blocked runc init under it
    proc.add(201, 200, ["runc", "init"])
    proc.shim(300, "c" * 64, OURS)  # forgotten, but the job's process runs
    proc.add(301, 300, ["python", "train.py"])
    proc.shim(400, "d" * 64, THEIRS)  # another installation's
    proc.shim(500, "e" * 64, OURS)  # the engine still knows it
    proc.shim(600, "f" * 64, OURS, namespace="k8s.io")  # not Docker's
    proc.add(700, 1, ["sleep", "1"])
    killed: list[int] = []
    reaper = ShimReaper(OURS, proc=proc.root, kill=lambda pid, _: killed.append(pid))

    assert reaper.reap(lambda container: container == "e" * 64) == 2
    assert killed == [100, 201, 200]  # children before their shim
    assert reaper.warned == {300}
    killed.clear()
    reaper.reap(lambda container: container == "e" * 64)  # (the fake ones do not die)
    assert reaper.warned == {300} and 300 not in killed and 301 not in killed


def test_an_unanswering_engine_stops_the_pass_before_any_kill(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.shim(100, "a" * 64, OURS)
    killed: list[int] = []

    def engine_down(_: str) -> bool:
        raise ConnectionError("engine down")

    reaper = ShimReaper(OURS, proc=proc.root, kill=lambda pid, _: killed.append(pid))
    with pytest.raises(ConnectionError):
        reaper.reap(engine_down)
    assert killed == []


def test_shims_are_told_from_other_processes(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.shim(100, "a" * 64, OURS)
    proc.add(101, 1, ["containerd-shim-runc-v2"])  # no -id: not one we can match
    found = {p.pid: shim_container(p) for p in processes(proc.root)}
    assert found == {100: "a" * 64, 101: None}
