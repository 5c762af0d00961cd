"""The agent reads which containers run from the kernel: processes in their cgroups.

A tmp ``/proc`` with real files of the shapes cgroup v1 (cgroupfs and
systemd drivers) and v2 write.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpudock.agent.engine import NodeEngine

A, B = "a" * 64, "b" * 64


def proc(tmp_path: Path, cgroups: dict[int, str]) -> Path:
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir(parents=True)
        (tmp_path / str(pid) / "cgroup").write_text(text)
    (tmp_path / "self").mkdir()
    return tmp_path


def test_processes_are_grouped_by_the_container_their_cgroup_names(tmp_path: Path) -> None:
    root = proc(
        tmp_path,
        {
            10: f"12:pids:/gpudock-sw2/{A}\n11:memory:/gpudock-sw2/{A}\n",
            11: f"12:pids:/docker/{A}\n",
            12: f"0::/system.slice/docker-{B}.scope\n",
            13: "12:pids:/user.slice\n0::/init.scope\n",
        },
    )
    engine = NodeEngine(lambda: None, proc=root)
    assert engine.processes() == {A: [10, 11], B: [12]} or engine.processes() == {
        A: [11, 10],
        B: [12],
    }


def test_a_dead_engines_containers_are_known_by_its_records(tmp_path: Path) -> None:
    root = proc(tmp_path / "proc", {20: f"0::/gpudock-sw3/{A}\n", 21: f"0::/x/{B}\n"})
    data = tmp_path / "data" / "containers"
    for cid, instance in ((A, "inst"), (B, "other")):
        (data / cid).mkdir(parents=True)
        labels = {"gpudock.instance": instance, "gpudock.job": "4"}
        (data / cid / "config.v2.json").write_text(json.dumps({"Config": {"Labels": labels}}))
    engine = NodeEngine(lambda: None, proc=root)
    engine.data_root = tmp_path / "data"
    assert engine.stray("inst") == [A]
    assert (engine.recorded_labels(A) or {})["gpudock.job"] == "4"
    assert engine.recorded_labels("c" * 64) is None
