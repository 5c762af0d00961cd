"""Cluster specs: the short grammar, YAML files, node views, and the real clusters."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kit.traces import real

from gpudock.queue.config import QueuesConfig
from gpudock.sim.cluster import (
    UNKNOWN_GPU_MEMORY,
    ClusterSpec,
    NodeGroup,
    alibaba_nodes,
    parse_cluster,
    philly_vc_queues,
)

GiB = 2**30
HELP = "expected NODESxGPUS[:MODEL[:MEMORY]] (joined by '+') or a YAML file"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ── the short grammar ──────────────────────────────────────────────────────


def test_nodes_x_gpus_gives_generic_80gib_gpus() -> None:
    spec = parse_cluster("352x8")
    assert spec.groups == (NodeGroup(352, 8),)
    assert (spec.node_count, spec.total_gpus, spec.queues) == (352, 2816, None)
    assert spec.groups[0].model == "GPU" and spec.groups[0].gpu_memory == 80 * GiB


@pytest.mark.parametrize(
    ("text", "group"),
    [
        ("64x8:H100", NodeGroup(64, 8, "H100")),
        ("64x8:H100:80GiB", NodeGroup(64, 8, "H100", 80 * GiB)),
        ("4X2:A100:40GB", NodeGroup(4, 2, "A100", 40 * 1000**3)),
        ("2x0", NodeGroup(2, 0)),
    ],
)
def test_model_and_memory_are_optional_suffixes(text: str, group: NodeGroup) -> None:
    assert parse_cluster(text).groups == (group,)


def test_groups_join_with_plus_and_number_nodes_across_the_cluster() -> None:
    spec = parse_cluster(" 32x8:H100 + 16x4:A100 ")
    assert spec.groups == (NodeGroup(32, 8, "H100"), NodeGroup(16, 4, "A100"))
    assert (spec.node_count, spec.total_gpus) == (48, 320)
    names = spec.node_names()
    assert names[0] == "node-0000" and names[31] == "node-0031" and names[32] == "node-0032"
    assert names[-1] == "node-0047" and len(set(names)) == 48


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("64y8", f"cluster '64y8': {HELP}"),
        ("", f"cluster '': {HELP}"),
        ("8", f"cluster '8': {HELP}"),
        ("32x8+64y8", f"cluster '32x8+64y8': group 2 '64y8': {HELP}"),
        ("32x8+", f"cluster '32x8+': group 2 '': {HELP}"),
        ("0x8", "cluster '0x8': a node group needs at least 1 node, got 0"),
        ("4x8:H100:80XB", "cluster '4x8:H100:80XB': unknown size unit 'XB' in '80XB'"),
        ("4x8:H100:0GiB", "cluster '4x8:H100:0GiB': GPU memory must be positive, got 0"),
        ("4x8:H100:80GiB:x", f"cluster '4x8:H100:80GiB:x': {HELP}"),
        ("99999999999x4", "cluster '99999999999x4': a cluster has at most 100,000 nodes"),
        ("1x99999999999", "cluster '1x99999999999': GPUs per node must be 0-1024"),
        ("60000x8+60000x8", "cluster '60000x8+60000x8': a cluster has at most 100,000 nodes"),
    ],
)
def test_a_bad_spec_says_what_is_expected(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_cluster(text)
    assert str(caught.value).startswith(problem)


# ── YAML files ─────────────────────────────────────────────────────────────

YAML = """
nodes:
  - {count: 2, gpus: 8, model: H100, gpu_memory: 80GiB, cpus: 96, memory_mib: 1048576, name: dgx}
  - "3x4:A100:40GiB"
  - {gpus: 1, model: T4, gpu_memory: 17179869184, name: edge}
queues:
  cohorts: [research]
  queues:
    - {name: vision, cohort: research, guarantee: {gpus: 16}}
"""


def test_a_yaml_file_gives_groups_names_and_queues(tmp_path: Path) -> None:
    spec = parse_cluster(str(write(tmp_path, "cluster.yaml", YAML)))
    assert spec.groups == (
        NodeGroup(2, 8, "H100", 80 * GiB, 96.0, 1048576, "dgx"),
        NodeGroup(3, 4, "A100", 40 * GiB),
        NodeGroup(1, 1, "T4", 16 * GiB, name="edge"),
    )
    assert spec.node_names() == (
        "dgx-0000",
        "dgx-0001",
        "node-0000",
        "node-0001",
        "node-0002",
        "edge",
    )
    assert isinstance(spec.queues, QueuesConfig)
    assert [q.name for q in spec.queues.queues] == ["vision"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- 1\n", "expected a mapping with a non-empty 'nodes' list"),
        ("nodes: []\n", "expected a mapping with a non-empty 'nodes' list"),
        ("nodes: ['2x8']\nextra: 1\n", "unknown key(s) extra; expected nodes, queues"),
        ("nodes: [{count: 2}]\n", "nodes[0]: 'gpus' (GPUs per node) is required"),
        ("nodes: [{gpus: 8, colour: red}]\n", "nodes[0]: unknown key(s) colour"),
        ("nodes: [{count: two, gpus: 8}]\n", "nodes[0]: count must be a whole number, got 'two'"),
        ("nodes: [{gpus: 8, cpus: many}]\n", "nodes[0]: cpus must be a number, got 'many'"),
        ("nodes: [{gpus: 8, gpu_memory: lots}]\n", "nodes[0]: expected a size such as"),
        ("nodes: ['2y8']\n", f"nodes[0] '2y8': {HELP}"),
        ("nodes: [7]\n", "nodes[0]: expected a mapping or a spec such as '32x8:H100'"),
        ("nodes: [{count: 1, gpus: 8, name: a}, {count: 1, gpus: 8, name: a}]\n", "node name 'a'"),
        ("nodes: ['2x8']\nqueues: {queues: [{name: q, cohort: ghost}]}\n", "queues: 1 validation"),
        ("nodes: [\n", "not valid YAML"),
        ("nodes: [{gpus: 8, cpus: .nan}]\n", "nodes[0]: cpus must be a positive number, got nan"),
        ("nodes: [{gpus: 8, cpus: .inf}]\n", "nodes[0]: cpus must be a positive number, got inf"),
        ("nodes: [{gpus: 2, mig: [big]}]\n", "nodes[0]: mig 'big' is not a MIG profile name"),
        ("nodes: [{gpus: 2, mig: 1g.10gb}]\n", "nodes[0]: mig must be a list of MIG profiles"),
        ("nodes: [{gpus: 2, mig: [1g.10gb], mig_gpus: 3}]\n", "mig_gpus must be 1-2"),
        ("nodes: [{gpus: 2, mig_gpus: 1}]\n", "mig_gpus must be 1-2 with a mig layout"),
    ],
)
def test_a_bad_yaml_file_names_the_file_and_the_entry(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ValueError) as caught:
        parse_cluster(str(path))
    assert str(caught.value).startswith(f"cluster file '{path}'")
    assert problem in str(caught.value)


def test_a_yaml_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"nodes: ['2x8']\n# \xff\xfe\n")
    with pytest.raises(ValueError, match=r"cluster file '.*c\.yaml': not UTF-8 text"):
        parse_cluster(str(path))


def test_a_missing_yaml_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    with pytest.raises(ValueError, match="does not exist"):
        parse_cluster(str(missing))


# ── node views ─────────────────────────────────────────────────────────────


def test_node_views_describe_idle_gpus_with_topology() -> None:
    spec = ClusterSpec((NodeGroup(1, 8, "H100", cpus=64.0), NodeGroup(1, 3, "L4", 24 * GiB)))
    first, second = spec.node_views()
    assert first.name == "node-0000" and first.cpus == 64.0 and first.available
    assert [g.uuid for g in first.gpus[:2]] == ["node-0000-gpu0", "node-0000-gpu1"]
    assert [g.index for g in first.gpus] == list(range(8))
    assert [g.numa for g in first.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {(g.name, g.memory_total, g.nvlink, g.idle) for g in first.gpus} == {
        ("H100", 80 * GiB, 0, True)
    }
    assert [g.numa for g in second.gpus] == [0, 0, 1]  # two halves, the first larger
    assert second.cpus is None and second.gpus[0].memory_total == 24 * GiB


def test_a_one_gpu_node_is_numa_zero_and_a_named_single_node_keeps_its_name() -> None:
    (view,) = ClusterSpec((NodeGroup(1, 1, name="solo"),)).node_views()
    assert view.name == "solo" and [(g.uuid, g.numa) for g in view.gpus] == [("solo-gpu0", 0)]


def test_node_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="node name 'node-0000' is used twice"):
        ClusterSpec((NodeGroup(1, 8), NodeGroup(1, 8, name="node-0000")))


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"count": 0, "gpus": 8}, "at least 1 node"),
        ({"count": 1, "gpus": -1}, "GPUs per node must be 0-1024, got -1"),
        ({"count": 1, "gpus": 8, "cpus": 0.0}, "cpus must be a positive number"),
        ({"count": 1, "gpus": 8, "model": "H 100"}, "GPU model must be non-empty without spaces"),
        ({"count": 1, "gpus": 8, "name": ""}, "node name must be non-empty"),
    ],
)
def test_node_groups_validate_themselves(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        NodeGroup(**kwargs)  # type: ignore[arg-type]


def test_a_cluster_needs_a_group() -> None:
    with pytest.raises(ValueError, match="at least one node group"):
        ClusterSpec(())


# ── Alibaba nodes ──────────────────────────────────────────────────────────


def test_alibaba_nodes_keep_their_names_cpus_and_model_memory(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n-a,64000,262144,2,P100\nn-b,96000,786432,8,V100M32\nn-c,96000,393216,8,G2\n",
    )
    spec = alibaba_nodes(path)
    assert spec.node_names() == ("n-a", "n-b", "n-c")
    assert spec.groups[0] == NodeGroup(1, 2, "P100", 16 * GiB, 64.0, 262144, "n-a")
    assert spec.groups[1].gpu_memory == 32 * GiB
    assert spec.groups[2].gpu_memory == UNKNOWN_GPU_MEMORY == 16 * GiB  # undisclosed model


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("sn,gpu,model\nn,1,T4\n", "nodes.csv: missing column(s) cpu_milli, memory_mib"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn,8000,1,x,T4\n", "nodes.csv line 2: gpu 'x'"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn,8000,1\n", "nodes.csv line 2: expected 5 fields"),
        ("sn,cpu_milli,memory_mib,gpu,model\n", "nodes.csv: no nodes"),
    ],
)
def test_a_bad_alibaba_node_list_is_reported(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        alibaba_nodes(write(tmp_path, "nodes.csv", text))
    assert str(caught.value).startswith(problem)


def test_real_alibaba_cluster_has_1213_nodes_and_6212_gpus() -> None:
    spec = alibaba_nodes(real("alibaba-gpu-v2023/openb_node_list_gpu_node.csv"))
    assert (spec.node_count, spec.total_gpus) == (1_213, 6_212)
    views = spec.node_views()
    assert views[0].name == "openb-node-0000" and sum(len(v.gpus) for v in views) == 6_212
    models = {g.name for v in views for g in v.gpus}
    assert models == {"G2", "G3", "T4", "P100", "V100M16", "V100M32", "A10"}


# ── Philly VC queues ───────────────────────────────────────────────────────

VCS = "vc,node num\nbig,64\nmid,32\nsmall,8\n"  # 104 nodes


def test_philly_vcs_become_queues_guaranteed_their_node_share(tmp_path: Path) -> None:
    config = philly_vc_queues(write(tmp_path, "vc.csv", VCS))  # 104 nodes x 8 GPUs
    assert config.cohorts == ["philly"]
    assert [(q.name, q.guarantee.gpus, q.cohort) for q in config.queues] == [
        ("big", 512, "philly"),
        ("mid", 256, "philly"),
        ("small", 64, "philly"),
    ]
    assert [q.weight for q in config.queues] == [64 / 104, 32 / 104, 8 / 104]
    assert all(q.borrow and q.lend and q.limit.gpus is None for q in config.queues)


@pytest.mark.parametrize("total", [0, 1, 7, 100, 101, 333, 1000])
def test_scaled_guarantees_sum_exactly_to_the_cluster(tmp_path: Path, total: int) -> None:
    config = philly_vc_queues(write(tmp_path, "vc.csv", VCS), total)
    guarantees = [q.guarantee.gpus or 0 for q in config.queues]
    assert sum(guarantees) == total
    for guarantee, nodes in zip(guarantees, (64, 32, 8), strict=True):
        assert abs(guarantee - total * nodes / 104) < 1  # largest remainder: off by < 1


def test_largest_remainders_get_the_leftover_gpus(tmp_path: Path) -> None:
    # 10 GPUs over 64:32:8 -> 6.15, 3.08, 0.77: floors 6+3+0, the leftover goes to "small".
    config = philly_vc_queues(write(tmp_path, "vc.csv", VCS), 10, cohort="helios")
    assert [q.guarantee.gpus for q in config.queues] == [6, 3, 1]
    assert config.cohorts == ["helios"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("vc,node num\na,8\na,4\n", "vc.csv line 3: VC 'a' is listed twice"),
        ("vc,node num\na,0\n", "vc.csv line 2: node num '0' is not >= 1"),
        ("vc,nodes\na,8\n", "vc.csv: missing column(s) node num"),
        ("vc,node num\n", "vc.csv: no VCs"),
    ],
)
def test_a_bad_vc_list_is_reported(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        philly_vc_queues(write(tmp_path, "vc.csv", text))
    assert str(caught.value).startswith(problem)


def test_a_vc_list_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "vc.csv"
    path.write_bytes(b"vc,node num\n\xff,8\n")
    with pytest.raises(ValueError, match=r"^vc\.csv: not UTF-8 text"):
        philly_vc_queues(path)


def test_real_philly_vcs_split_2816_gpus_by_nodes() -> None:
    path = real("philly/philly_vc.csv")
    native = philly_vc_queues(path)
    assert len(native.queues) == 11
    assert sum(q.guarantee.gpus or 0 for q in native.queues) == 2_816
    assert native.queues[0].name == "6214e9" and native.queues[0].guarantee.gpus == 512
    assert sum(q.guarantee.gpus or 0 for q in philly_vc_queues(path, 1000).queues) == 1000


def test_a_mig_layout_puts_the_last_gpus_in_mig_mode(tmp_path: Path) -> None:
    text = "nodes: [{count: 1, gpus: 3, name: a, mig: [3g.40gb, 1g.10gb], mig_gpus: 1}]\n"
    (view,) = parse_cluster(str(write(tmp_path, "c.yaml", text))).node_views()
    assert [g.healthy for g in view.gpus] == [True, True, False]  # GPU 2: MIG devices only
    assert [(m.uuid, m.parent, m.profile, m.held) for m in view.migs] == [
        ("a-gpu2-mig0", "a-gpu2", "3g.40gb", False),
        ("a-gpu2-mig1", "a-gpu2", "1g.10gb", False),
    ]
