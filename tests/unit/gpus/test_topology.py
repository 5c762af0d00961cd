"""GPU topology helpers: bus ids, NVLink domains, sysfs NUMA, the declared override."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpudock.core.inventory import GpuInfo, NodeInventory
from gpudock.gpus import apply_declared_topology, emulated_inventory
from gpudock.gpus.topology import normalise_bus_id, numa_from_sysfs, nvlink_domains

GIB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),  # NVML's busId
        ("0000:18:00.0", "0000:18:00.0"),  # NVML's busIdLegacy, sysfs
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("18:00.0", "0000:18:00.0"),
        (b"00000001:3B:00.0\0\0garbage", "0001:3b:00.0"),
        ("", None),
        ("not a bus id", None),
        ("0000:18:00.9", None),
    ],
)
def test_bus_ids_are_normalised_to_the_sysfs_form(text: str | bytes, expected: str | None) -> None:
    assert normalise_bus_id(text) == expected


def test_nvlink_domains_are_connected_components_numbered_by_lowest_gpu() -> None:
    gpus = {0: "a", 1: "b", 2: "c", 3: "d", 4: "e", 5: "f"}
    links = [("d", "e"), ("e", "d"), ("a", "b"), ("b", "c"), ("f", "nvswitch")]

    assert nvlink_domains(gpus, links) == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: None}


def test_gpus_behind_one_switch_form_one_domain() -> None:
    gpus = {i: f"gpu{i}" for i in range(8)}
    links = [(f"gpu{i}", f"switch{s}") for i in range(8) for s in range(4)]
    links += [(f"switch{s}", f"gpu{i}") for i in range(8) for s in range(4)]

    assert set(nvlink_domains(gpus, links).values()) == {0}


def test_no_links_means_no_domains() -> None:
    assert nvlink_domains({0: "a", 1: "b"}, []) == {0: None, 1: None}


def test_numa_node_from_sysfs(tmp_path: Path) -> None:
    for bus, value in (("0000:18:00.0", "1\n"), ("0000:19:00.0", "-1\n"), ("0000:1a:00.0", "x")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "numa_node").write_text(value)

    assert numa_from_sysfs("0000:18:00.0", tmp_path) == 1
    assert numa_from_sysfs("0000:19:00.0", tmp_path) is None  # -1: no NUMA affinity
    assert numa_from_sysfs("0000:1a:00.0", tmp_path) is None  # unreadable
    assert numa_from_sysfs("0000:1b:00.0", tmp_path) is None  # no such device


def _node(n: int) -> NodeInventory:
    gpus = tuple(
        GpuInfo(index=i, uuid=f"GPU-{i}", name="H100", memory_total=80 * GIB, numa=9, nvlink=9)
        for i in range(n)
    )
    return NodeInventory(name="node-a", gpus=gpus, source="nvml")


def test_a_declared_kind_replaces_the_discovered_one_and_the_other_is_kept() -> None:
    declared = apply_declared_topology(_node(4), nvlink={0: 0, 1: 0, 2: 1, 3: 1}, numa=None)

    assert [(g.numa, g.nvlink) for g in declared.gpus] == [(9, 0), (9, 0), (9, 1), (9, 1)]
    assert declared.note is None


def test_gpus_in_no_declared_group_get_none() -> None:
    declared = apply_declared_topology(_node(3), nvlink={0: 0, 1: 0}, numa={2: 1})

    assert [(g.numa, g.nvlink) for g in declared.gpus] == [(None, 0), (None, 0), (1, None)]


def test_nothing_declared_changes_nothing() -> None:
    node = _node(2)
    assert apply_declared_topology(node, None, None) is node


def test_declared_gpus_the_node_lacks_are_reported_once_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpudock.gpus"):
        declared = apply_declared_topology(
            _node(4), nvlink={0: 0, 1: 0, 4: 1, 5: 1, 6: 1, 9: 2}, numa={0: 0, 8: 1}
        )

    problem = "node.topology names GPUs 4-6,8,9, which node-a does not have (it has 0-3); ignored"
    assert [r.getMessage() for r in caplog.records] == [problem]
    assert declared.note == problem
    assert [g.nvlink for g in declared.gpus] == [0, 0, None, None]


@pytest.mark.parametrize(
    ("spec", "topology"),
    [
        ("8xH100-80GB", [(0, 0)] * 4 + [(1, 0)] * 4),
        ("4xH100-80GB", [(0, 0), (0, 0), (1, 0), (1, 0)]),
        ("2xA100-40GB", [(0, 0), (0, 0)]),  # under 4 GPUs: one NUMA node
        ("H100-80GB", [(0, None)]),  # a lone GPU has no NVLink peer
        (
            "2xA100-40GB,1xT4-16GB,3xL4-24GB",
            [(0, 0), (0, 0), (0, None), (1, 1), (1, 1), (1, 1)],
        ),
    ],
)
def test_emulated_nodes_get_an_hgx_like_topology(
    spec: str, topology: list[tuple[int, int | None]]
) -> None:
    gpus = emulated_inventory("node-a", spec).gpus
    assert [(g.numa, g.nvlink) for g in gpus] == topology
