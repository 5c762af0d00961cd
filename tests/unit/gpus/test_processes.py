"""PID → container id, from the cgroup paths of every common engine setup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudock.gpus.processes import GONE, ContainerOfPid, container_id_from_cgroup

ID = "9072d63110f7a65e00be6a06a32566ce4018ec953ee977cb713673cb23460eb9"


@pytest.mark.parametrize(
    "text",
    [
        f"4:memory:/docker/{ID}\n0::/docker/{ID}\n",  # cgroupfs, v1
        f"0::/system.slice/docker-{ID}.scope\n",  # systemd, v2
        f"0::/gpudock-nohook/{ID}\n",  # dockerd --cgroup-parent
        f"0::/docker/{ID}/init.scope\n",  # a nested cgroup inside the container
        f"0::/kubepods/burstable/pod1/cri-containerd-{ID}.scope\n",
    ],
)
def test_the_container_id_is_found_in_any_layout(text: str) -> None:
    assert container_id_from_cgroup(text) == ID


@pytest.mark.parametrize("text", ["0::/\n", "4:memory:/process_api/7e17892bba10e673\n", ""])
def test_a_host_process_has_no_container(text: str) -> None:
    assert container_id_from_cgroup(text) is None


def test_lookups_are_cached_per_process_start_and_forgotten(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    stat = "42 (a name (with) spaces) S " + " ".join(["0"] * 18) + " 777 0\n"
    (proc / "42" / "stat").write_text(stat)
    (proc / "42" / "cgroup").write_text(f"0::/docker/{ID}\n")
    pids = ContainerOfPid(proc)

    assert pids.lookup(42) == ID
    (proc / "42" / "cgroup").write_text("0::/\n")
    assert pids.lookup(42) == ID  # the same process: cached
    (proc / "42" / "stat").write_text(stat.replace(" 777 ", " 778 "))
    assert pids.lookup(42) is None  # a new process with the reused PID: looked up again
    assert pids.lookup(43) == GONE  # ended, or never there: attributable to nothing


def test_this_process_is_in_no_container() -> None:
    assert ContainerOfPid().lookup(os.getpid()) is None
