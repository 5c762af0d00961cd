"""Server config: defaults, parsing, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.config import GpuTopologyConfig, load_config
from gpudock.core.errors import InvalidInput
from gpudock.core.inventory import NodeTraits


def test_defaults_are_hardened() -> None:
    cfg = load_config(None)
    ex = cfg.executor
    assert ex.cap_drop_all and ex.no_new_privileges and ex.init and ex.pids_limit > 0
    assert ex.allowed_mounts == [] and cfg.scheduler.placement == "binpack"


def test_yaml_is_parsed_with_units(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "reconcile_interval: 2s\nexecutor:\n  default_memory: 8GiB\n  stop_grace: 1m\n"
        "  allowed_mounts: [/data/]\nscheduler: {placement: spread}\n"
    )
    cfg = load_config(path)
    assert cfg.reconcile_interval == 2.0 and cfg.executor.stop_grace == 60.0
    assert cfg.executor.default_memory == 8 * 1024**3
    assert [str(m) for m in cfg.executor.allowed_mounts] == ["/data:ro"]
    assert cfg.scheduler.placement == "spread"


@pytest.mark.parametrize(
    "mounts",
    [
        '["/datasets:ro", "/scratch/:rw", /old]',
        "{/datasets: ro, /scratch: rw, /old: ro}",
        "[{path: /datasets}, {path: /scratch, mode: rw}, {path: /old, mode: ro}]",
    ],
)
def test_allowed_mounts_say_ro_or_rw_and_default_to_ro(tmp_path: Path, mounts: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"executor:\n  allowed_mounts: {mounts}\n")
    entries = load_config(path).executor.allowed_mounts
    assert [str(m) for m in entries] == ["/datasets:ro", "/scratch:rw", "/old:ro"]


def test_container_defaults_that_protect_the_host() -> None:
    ex = load_config(None).executor
    assert ex.user is None and not ex.allow_swap
    assert (ex.log_max_size, ex.log_max_files) == (50 * 1024**2, 3)
    assert ex.driver_capabilities == "compute,utility"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor:\n  pid_limit: 5\n", "executor.pid_limit: unknown field"),
        ("scheduler: {placement: random}\n", "scheduler.placement"),
        ("executor: {allowed_mounts: [data]}\n", "must be an absolute path"),
        ("executor: {allowed_mounts: ['/data:rx']}\n", "mode must be 'ro' or 'rw'"),
        ("executor: {allowed_mounts: {/data: rwx}}\n", "allowed_mounts.0.mode"),
        ("executor: {user: root}\n", "executor.user: user 'root' must be numeric"),
        ("executor: {user: '0:0'}\n", "must not be root"),
        ("executor: {user: '1000:0'}\n", "must not be root"),
        ("executor: {driver_capabilities: 'compute,gpu'}\n", "unknown driver capabilities gpu"),
        ("executor: {log_max_files: 0}\n", "executor.log_max_files"),
        ("- a\n- b\n", "must be a mapping"),
        ("executor: [\n", r"c\.yaml:2:1: expected the node content, but found '<stream end>'"),
        # non-finite or mistyped units: never a traceback, nor a loop that crashes later
        ("reconcile_interval: .inf\n", "reconcile_interval: duration must be a finite number"),
        ("reconcile_interval: .nan\n", "reconcile_interval: duration must be a finite number"),
        ("reconcile_interval: [1]\n", "reconcile_interval: expected a duration"),
        ("reconcile_interval: null\n", "reconcile_interval: expected a duration"),
        ("executor: {stop_grace: .nan}\n", "executor.stop_grace: duration must be a finite"),
        ("executor: {default_memory: .inf}\n", "executor.default_memory: size must be a finite"),
        ("executor: {default_memory: [1]}\n", "executor.default_memory: expected a size"),
        ("scheduler: {queues: {fair_share: {half_life: [1]}}}\n", "half_life: expected a duration"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfe node_name: x\n")
    with pytest.raises(InvalidInput, match=r"config .*c\.yaml is not UTF-8 text"):
        load_config(path)


def test_node_defaults_offer_everything_to_everyone() -> None:
    node = load_config(None).node
    assert (node.labels, node.taints, node.cpus, node.topology) == ({}, [], None, None)
    assert node.traits() == NodeTraits()


def test_node_labels_taints_cpus_and_topology(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "node_name: gpu-07\n"
        "node:\n"
        "  labels: {zone: b, gpu.family: hopper}\n"
        "  taints: ['reserved=training:NoSchedule', 'spot', 'maint=now']\n"
        "  cpus: 96\n"
        "  topology:\n"
        "    nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
        "    numa: [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
    )
    cfg = load_config(path)
    assert cfg.node_name == "gpu-07"
    assert cfg.node.traits() == NodeTraits(
        labels={"gpu.family": "hopper", "zone": "b"},
        taints=("reserved=training:NoSchedule", "spot:NoSchedule", "maint=now:NoSchedule"),
        cpus=96.0,
    )
    topology = cfg.node.topology
    assert topology is not None
    assert topology.groups_of("nvlink") == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert topology.groups_of("numa") == topology.groups_of("nvlink")


def test_a_topology_may_declare_one_kind_only() -> None:
    topology = GpuTopologyConfig(numa=[[0], [1]])
    assert topology.groups_of("numa") == {0: 0, 1: 1}
    assert topology.groups_of("nvlink") is None


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            "labels: {'bad key': x}",
            "node.labels: label key 'bad key' must be 1-63 letters, digits or '_./-', "
            "starting and ending with a letter or digit",
        ),
        ("labels: {rack: 3}", "node.labels.rack: Input should be a valid string"),
        (
            "taints: ['spot:NoExecute']",
            "node.taints: taint 'spot:NoExecute': effect must be NoSchedule, got 'NoExecute' "
            "(gpudock never evicts running jobs for taints)",
        ),
        (
            "taints: ['ok', 'bad key=x']",
            "node.taints: taint 'bad key=x': label key 'bad key' must be 1-63 letters, digits "
            "or '_./-', starting and ending with a letter or digit",
        ),
        (
            "taints: ['*:NoSchedule']",
            "node.taints: taint '*:NoSchedule': '*' is only valid in a toleration",
        ),
        ("taints: [spot=a, 'spot=b:NoSchedule']", "node.taints: taint key 'spot' is given twice"),
        ("cpus: 0", "node.cpus: Input should be greater than 0"),
        ("cpu: 8", "node.cpu: unknown field"),
        ("topology: {nvlink: [[0, 1], []]}", "node.topology.nvlink: group 1 is empty"),
        (
            "topology: {nvlink: [[0, 1], [2]]}",
            "node.topology.nvlink: group 1 has one GPU; an NVLink domain needs at least two "
            "(leave a GPU without NVLink peers out)",
        ),
        (
            "topology: {numa: [[0, 1], [1, 2]]}",
            "node.topology.numa: GPU 1 is in groups 0 and 1; groups must be disjoint",
        ),
        ("topology: {numa: [[0, 0]]}", "node.topology.numa: group 0 names GPU 0 twice"),
        ("topology: {numa: [[-1]]}", "node.topology.numa: group 0: GPU index -1 must be >= 0"),
        ("topology: {pcie: [[0]]}", "node.topology.pcie: unknown field"),
    ],
)
def test_bad_node_config_names_the_key_and_the_entry(
    tmp_path: Path, node: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"node:\n  {node}\n")
    with pytest.raises(InvalidInput) as caught:
        load_config(path)
    assert caught.value.message == f"config {path}: {message}"
