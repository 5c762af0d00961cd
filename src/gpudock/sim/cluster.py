"""Simulated clusters: node groups, parsed from a short spec or a YAML file.

A ``ClusterSpec`` is a tuple of ``NodeGroup`` (identical nodes) plus optional
queues; ``node_views()`` turns it into the scheduler's ``NodeView``s, all GPUs
idle. Specs::

    352x8                   352 nodes of 8 GPUs ("GPU", 80GiB each)
    64x8:H100               model H100
    64x8:H100:80GiB         and the memory of each GPU (any ``parse_size`` size)
    32x8:H100+16x4:A100     several groups
    cluster.yaml            {nodes: [{count, gpus, model, gpu_memory, cpus,
                             memory_mib, name, mig, mig_gpus} | "32x8:H100", ...],
                             queues: <the server config's queues section>}

``mig: [3g.40gb, 1g.10gb]`` lays out that MIG layout on each node's last
``mig_gpus`` GPUs (default: all of them): GPU ``i``'s devices are
``{node}-gpu{i}-mig{slot}``, the units of jobs asking ``mig`` (as discovery
reports them to the server).

Real clusters: ``alibaba_nodes`` reads the Alibaba 2023 node list (one node
per row, named by its ``sn``); ``philly_vc_queues`` turns Philly's virtual
clusters into queues whose guarantees split the cluster by node share.

Node names: a group's nodes are ``{name}-{k:04d}`` with ``k`` counting every
node of that prefix across the cluster (default prefix ``node``), so
``32x8+16x4`` gives ``node-0000`` .. ``node-0047``; a group of one node with an
explicit ``name`` is named exactly that. Names are unique or the spec is
rejected.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpudock.core.mig import profile_syntax_problem
from gpudock.core.units import parse_size
from gpudock.queue.config import QueueConfig, QueuesConfig, QuotaConfig
from gpudock.scheduler.snapshot import GpuView, MigView, NodeView

GiB = 2**30
DEFAULT_PREFIX = "node"
SPEC_HELP = "NODESxGPUS[:MODEL[:MEMORY]] (joined by '+') or a YAML file"
MAX_NODES = 100_000
"""Nodes a simulated cluster may have in all (a larger one would take minutes to build)."""
MAX_GPUS_PER_NODE = 1024
_GROUP_RE = re.compile(r"^(\d+)[xX](\d+)(?::([^:+\s]+))?(?::([^:+\s]+))?$")

# GPU memory of the Alibaba 2023 models. G1/G2/G3 are undisclosed internal
# models: they get UNKNOWN_GPU_MEMORY, as does any model not listed here.
ALIBABA_GPU_MEMORY: dict[str, int] = {
    "P100": 16 * GiB,
    "T4": 16 * GiB,
    "V100M16": 16 * GiB,
    "V100M32": 32 * GiB,
    "A10": 24 * GiB,
}
UNKNOWN_GPU_MEMORY = 16 * GiB


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` identical nodes of ``gpus`` GPUs of ``model`` (``gpu_memory`` bytes each).

    ``cpus``: cores jobs may request per node (None: CPUs are not counted);
    ``memory_mib``: host memory, informational. ``name``: node-name prefix,
    or the exact name of a one-node group. ``mig``: the MIG layout (profiles, e.g.
    ``("3g.40gb", "1g.10gb")``) of each of the node's last ``mig_gpus`` GPUs, which
    are in MIG mode (no whole-GPU or share job; their MIG devices are the units).
    """

    count: int
    gpus: int
    model: str = "GPU"
    gpu_memory: int = 80 * GiB
    cpus: float | None = None
    memory_mib: int | None = None
    name: str | None = None
    mig: tuple[str, ...] = ()
    mig_gpus: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a node group needs at least 1 node, got {self.count}")
        if self.count > MAX_NODES:
            raise ValueError(f"a cluster has at most {MAX_NODES:,} nodes, got {self.count:,}")
        if not 0 <= self.gpus <= MAX_GPUS_PER_NODE:
            raise ValueError(f"GPUs per node must be 0-{MAX_GPUS_PER_NODE}, got {self.gpus:,}")
        if self.gpu_memory <= 0:
            raise ValueError(f"GPU memory must be positive, got {self.gpu_memory}")
        if self.cpus is not None and not (math.isfinite(self.cpus) and self.cpus > 0):
            raise ValueError(f"cpus must be a positive number, got {self.cpus}")
        if self.memory_mib is not None and self.memory_mib < 0:
            raise ValueError(f"memory_mib must not be negative, got {self.memory_mib}")
        if not 0 <= self.mig_gpus <= self.gpus or (self.mig_gpus > 0) != bool(self.mig):
            raise ValueError(
                f"mig_gpus must be 1-{self.gpus} with a mig layout (0 without), got {self.mig_gpus}"
            )
        for profile in self.mig:
            if (problem := profile_syntax_problem(profile)) is not None:
                raise ValueError(problem)
        for what, text in (("GPU model", self.model), ("node name", self.name)):
            if text is not None and (not text or any(ch.isspace() for ch in text)):
                raise ValueError(f"{what} must be non-empty without spaces, got {text!r}")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The simulated cluster: node groups in order, and optionally its queues."""

    groups: tuple[NodeGroup, ...]
    queues: QueuesConfig | None = None

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a cluster needs at least one node group")
        count = sum(group.count for group in self.groups)
        if count > MAX_NODES:
            raise ValueError(f"a cluster has at most {MAX_NODES:,} nodes, got {count:,}")
        seen: set[str] = set()
        for name in self.node_names():
            if name in seen:
                raise ValueError(f"node name {name!r} is used twice")
            seen.add(name)

    @property
    def total_gpus(self) -> int:
        return sum(group.count * group.gpus for group in self.groups)

    @property
    def node_count(self) -> int:
        return sum(group.count for group in self.groups)

    def node_names(self) -> tuple[str, ...]:
        """Every node's name, group by group (see the module docstring)."""
        names: list[str] = []
        next_index: dict[str, int] = {}
        for group in self.groups:
            if group.count == 1 and group.name is not None:
                names.append(group.name)
                continue
            prefix = group.name or DEFAULT_PREFIX
            first = next_index.get(prefix, 0)
            names.extend(f"{prefix}-{k:04d}" for k in range(first, first + group.count))
            next_index[prefix] = first + group.count
        return tuple(names)

    def node_views(self) -> tuple[NodeView, ...]:
        """Idle, healthy nodes for a scheduler ``Snapshot``; built fresh on each call.

        GPU ``i`` of node ``n`` has uuid ``{n}-gpu{i}``, NVLink domain 0 (one
        per node) and NUMA node ``i // ceil(gpus / 2)`` (two halves; 0 for a
        one-GPU node).
        """
        names = iter(self.node_names())
        views: list[NodeView] = []
        for group in self.groups:
            half = max(1, -(-group.gpus // 2))
            first_mig = group.gpus - group.mig_gpus
            for _ in range(group.count):
                node = next(names)
                gpus = tuple(
                    GpuView(
                        uuid=f"{node}-gpu{i}",
                        index=i,
                        name=group.model,
                        memory_total=group.gpu_memory,
                        healthy=i < first_mig,  # a GPU in MIG mode, as the store shows it
                        numa=i // half,
                        nvlink=0,
                    )
                    for i in range(group.gpus)
                )
                migs = tuple(
                    MigView(
                        f"{node}-gpu{i}-mig{slot}", f"{node}-gpu{i}", profile, _mig_bytes(profile)
                    )
                    for i in range(first_mig, group.gpus)
                    for slot, profile in enumerate(group.mig)
                )
                views.append(NodeView(name=node, gpus=gpus, cpus=group.cpus, migs=migs))
        return tuple(views)


# ── specs ─────────────────────────────────────────────────────────────────


def parse_cluster(text: str) -> ClusterSpec:
    """Parse ``NODESxGPUS[:MODEL[:MEMORY]]`` groups joined by ``+``, or a YAML file path.

    Raises ``ValueError`` naming the spec (and group) at fault.
    """
    spec = text.strip()
    if not _GROUP_RE.match(spec.split("+")[0].strip()) and _is_path(spec):
        return _load_yaml(Path(spec))
    where = f"cluster {text!r}"
    groups = _parse_groups(spec, where)
    try:
        return ClusterSpec(groups)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _is_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or os.sep in spec or Path(spec).is_file()


def _parse_groups(spec: str, where: str) -> tuple[NodeGroup, ...]:
    parts = spec.split("+")
    groups: list[NodeGroup] = []
    for number, part in enumerate(parts, 1):
        at = where if len(parts) == 1 else f"{where}: group {number} {part.strip()!r}"
        match = _GROUP_RE.match(part.strip())
        if not match:
            raise ValueError(f"{at}: expected {SPEC_HELP}")
        count, gpus, model, memory = match.groups()
        try:
            size = 80 * GiB if memory is None else parse_size(memory)
            groups.append(NodeGroup(int(count), int(gpus), model or "GPU", size))
        except ValueError as exc:
            raise ValueError(f"{at}: {exc}") from None
    return tuple(groups)


def _load_yaml(path: Path) -> ClusterSpec:
    where = f"cluster file {str(path)!r}"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist; expected {SPEC_HELP}") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise ValueError(f"{where}: expected a mapping with a non-empty 'nodes' list")
    unknown = sorted(set(data) - {"nodes", "queues"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; expected nodes, queues")
    groups: list[NodeGroup] = []
    for index, entry in enumerate(data["nodes"]):
        at = f"{where}: nodes[{index}]"
        if isinstance(entry, str):
            groups.extend(_parse_groups(entry, f"{at} {entry!r}"))
        elif isinstance(entry, dict):
            groups.append(_yaml_group(entry, at))
        else:
            raise ValueError(f"{at}: expected a mapping or a spec such as '32x8:H100'")
    queues = None
    if data.get("queues") is not None:
        try:
            queues = QueuesConfig.model_validate(data["queues"])
        except ValidationError as exc:
            raise ValueError(f"{where}: queues: {exc}") from None
    try:
        return ClusterSpec(tuple(groups), queues)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


_YAML_KEYS = (
    "count", "gpus", "model", "gpu_memory", "cpus", "memory_mib", "name", "mig", "mig_gpus"
)  # fmt: skip


def _yaml_group(entry: Mapping[str, Any], at: str) -> NodeGroup:
    unknown = sorted(set(entry) - set(_YAML_KEYS))
    if unknown:
        raise ValueError(
            f"{at}: unknown key(s) {', '.join(unknown)}; expected {', '.join(_YAML_KEYS)}"
        )
    if "gpus" not in entry:
        raise ValueError(f"{at}: 'gpus' (GPUs per node) is required")
    try:
        memory = entry.get("gpu_memory")
        cpus, memory_mib, name = entry.get("cpus"), entry.get("memory_mib"), entry.get("name")
        mig = entry.get("mig") or []
        if not isinstance(mig, list) or not all(isinstance(p, str) for p in mig):
            raise ValueError(f"mig must be a list of MIG profiles such as 1g.10gb, got {mig!r}")
        gpus = _int(entry["gpus"], "gpus")
        mig_gpus = _int(entry.get("mig_gpus", gpus if mig else 0), "mig_gpus")
        return NodeGroup(
            count=_int(entry.get("count", 1), "count"),
            gpus=gpus,
            model=str(entry.get("model", "GPU")),
            gpu_memory=80 * GiB if memory is None else parse_size(memory),
            cpus=None if cpus is None else _number(cpus, "cpus"),
            memory_mib=None if memory_mib is None else _int(memory_mib, "memory_mib"),
            name=None if name is None else str(name),
            mig=tuple(mig),
            mig_gpus=mig_gpus,
        )
    except ValueError as exc:
        raise ValueError(f"{at}: {exc}") from None


def _mig_bytes(profile: str) -> int:
    """A MIG profile's memory by its name: ``1g.10gb`` has 10 GB (``core/mig.py``)."""
    return int(profile.split(".", 1)[1].split("gb", 1)[0]) * 10**9


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


# ── real clusters ─────────────────────────────────────────────────────────


def alibaba_nodes(path: str | os.PathLike[str]) -> ClusterSpec:
    """The Alibaba 2023 GPU nodes (``openb_node_list_gpu_node.csv``), one group per node.

    Each node keeps its ``sn`` as name, ``cpu_milli / 1000`` cores and
    ``memory_mib``; GPU memory comes from ``ALIBABA_GPU_MEMORY``
    (``UNKNOWN_GPU_MEMORY`` for G1/G2/G3 and other unlisted models).
    """
    rows = _csv_rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    groups: list[NodeGroup] = []
    for line, row in rows:
        try:
            model = row["model"].strip() or "GPU"
            groups.append(
                NodeGroup(
                    count=1,
                    gpus=_cell_int(row, "gpu"),
                    model=model,
                    gpu_memory=ALIBABA_GPU_MEMORY.get(model, UNKNOWN_GPU_MEMORY),
                    cpus=_cell_int(row, "cpu_milli") / 1000,
                    memory_mib=_cell_int(row, "memory_mib"),
                    name=row["sn"].strip(),
                )
            )
        except ValueError as exc:
            raise ValueError(f"{Path(path).name} line {line}: {exc}") from None
    if not groups:
        raise ValueError(f"{Path(path).name}: no nodes")
    return ClusterSpec(tuple(groups))


def philly_vc_queues(
    path: str | os.PathLike[str],
    total_gpus: int | None = None,
    gpus_per_node: int = 8,
    *,
    cohort: str = "philly",
) -> QueuesConfig:
    """One queue per Philly VC (``philly_vc.csv``: ``vc,node num``), all in ``cohort``.

    Each VC's guarantee is its share of the VCs' nodes times ``total_gpus``
    (default: all the VCs' nodes x ``gpus_per_node``, 2,816 for the real
    file), rounded by largest remainder so the guarantees sum to exactly
    ``total_gpus``; its fair-share weight is that share. Queues borrow and
    lend freely and have no limit.
    """
    rows = _csv_rows(path, ("vc", "node num"))
    nodes: dict[str, int] = {}
    for line, row in rows:
        vc, count = row["vc"].strip(), row["node num"].strip()
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"{Path(path).name} line {line}: node num {count!r} is not >= 1")
        if vc in nodes:
            raise ValueError(f"{Path(path).name} line {line}: VC {vc!r} is listed twice")
        nodes[vc] = int(count)
    if not nodes:
        raise ValueError(f"{Path(path).name}: no VCs")
    all_nodes = sum(nodes.values())
    total = all_nodes * gpus_per_node if total_gpus is None else total_gpus
    if total < 0:
        raise ValueError(f"total_gpus must not be negative, got {total}")
    guarantees = _largest_remainder(total, list(nodes.values()))
    queues = [
        QueueConfig(
            name=vc,
            cohort=cohort,
            weight=count / all_nodes,
            guarantee=QuotaConfig(gpus=guarantee),
        )
        for (vc, count), guarantee in zip(nodes.items(), guarantees, strict=True)
    ]
    return QueuesConfig(cohorts=[cohort], queues=queues)


def _largest_remainder(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights``; floors plus one for the largest remainders.

    Exact integer arithmetic; ties go to the earlier weight. Sums to ``total``.
    """
    whole = sum(weights)
    shares = [total * weight // whole for weight in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _cell_int(row: Mapping[str, str], column: str) -> int:
    text = row[column].strip()
    if not text.isdigit():
        raise ValueError(f"{column} {text!r} is not a whole number >= 0")
    return int(text)


def _csv_rows(
    path: str | os.PathLike[str], required: tuple[str, ...]
) -> list[tuple[int, dict[str, str]]]:
    """(line, row) pairs of a CSV with ``required`` columns; ValueError naming the file."""
    name = Path(path).name
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.DictReader(text.splitlines())
    missing = [column for column in required if column not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(
            f"{name}: missing column(s) {', '.join(missing)} (expected {', '.join(required)})"
        )
    rows: list[tuple[int, dict[str, str]]] = []
    for row in reader:
        if None in row or None in row.values():
            width = len(reader.fieldnames or ())
            raise ValueError(f"{name} line {reader.line_num}: expected {width} fields")
        if any(value.strip() for value in row.values()):
            rows.append((reader.line_num, row))
    return rows
