"""GPU topology: NVLink domains and NUMA nodes, from links, sysfs or the config.

Pure helpers, shared by NVML discovery and the declared topology::

    NVML links (gpu bus id -> remote bus id) --nvlink_domains--> {gpu: domain | None}
    PCI bus id --numa_from_sysfs--> /sys/bus/pci/devices/<bus id>/numa_node
    inventory + node.topology --apply_declared_topology--> inventory (declared kinds replaced)

An NVLink domain is a connected component of the NVLink graph. Its vertices
are PCI bus ids, so a link to an NVSwitch (a bus id that is no GPU) joins
every GPU wired to that switch. Domains are numbered 0, 1, ... in the order
of their lowest GPU index; a GPU with no NVLink peer gets None.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gpudock.core.inventory import NodeInventory

log = logging.getLogger("gpudock.gpus")

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")
_BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def normalise_bus_id(text: str | bytes) -> str | None:
    """``00000000:18:00.0`` (NVML) or ``0000:18:00.0`` -> ``0000:18:00.0`` (sysfs form).

    Returns None for text that is not a PCI bus id (empty, garbage).
    """
    if isinstance(text, bytes):
        text = text.split(b"\0", 1)[0].decode("ascii", "replace")
    match = _BUS_ID_RE.match(text.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def nvlink_domains(
    gpus: Mapping[int, str], links: Iterable[tuple[str, str]]
) -> dict[int, int | None]:
    """NVLink domain of each GPU: ``gpus`` maps GPU index -> bus id, ``links`` are
    (bus id, bus id) edges (either end may be a non-GPU device such as an NVSwitch).

    Every GPU of ``gpus`` is in the result. A GPU whose component holds no
    other GPU gets None. Pure; O(links).
    """
    parent: dict[str, str] = {}

    def root(vertex: str) -> str:
        parent.setdefault(vertex, vertex)
        while parent[vertex] != vertex:
            parent[vertex] = parent[parent[vertex]]
            vertex = parent[vertex]
        return vertex

    for a, b in links:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[str, list[int]] = {}
    for index in sorted(gpus):
        members.setdefault(root(gpus[index]), []).append(index)
    domains: dict[int, int | None] = dict.fromkeys(gpus, None)
    shared = [group for group in members.values() if len(group) > 1]
    for number, group in enumerate(sorted(shared, key=min)):
        for index in group:
            domains[index] = number
    return domains


def numa_from_sysfs(bus_id: str, root: Path = SYSFS_PCI_DEVICES) -> int | None:
    """The NUMA node the kernel reports for PCI device ``bus_id``; None if unknown.

    Reads ``root/<bus id>/numa_node``; -1 (no NUMA affinity), a missing file
    or unreadable content give None. Never raises.
    """
    try:
        value = int((root / bus_id / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def apply_declared_topology(
    inventory: NodeInventory,
    nvlink: Mapping[int, int] | None,
    numa: Mapping[int, int] | None,
) -> NodeInventory:
    """``inventory`` with the declared topology (``{gpu index: group}`` per kind).

    A kind that is None keeps what discovery found; a given kind replaces it
    for every GPU (a GPU in no group gets None). Declared indices the node does
    not have are named in one WARNING on ``gpudock.gpus`` and in the note,
    and otherwise ignored. Pure apart from that log line.
    """
    if nvlink is None and numa is None:
        return inventory
    have = {gpu.index for gpu in inventory.gpus}
    declared = set(nvlink or ()) | set(numa or ())
    gpus = tuple(
        dataclasses.replace(
            gpu,
            nvlink=gpu.nvlink if nvlink is None else nvlink.get(gpu.index),
            numa=gpu.numa if numa is None else numa.get(gpu.index),
        )
        for gpu in inventory.gpus
    )
    note = inventory.note
    if missing := sorted(declared - have):
        problem = (
            f"node.topology names GPU{'s' if len(missing) > 1 else ''} {_indices(missing)}, "
            f"which {inventory.name} does not have "
            f"(it has {_indices(sorted(have)) if have else 'no GPUs'}); ignored"
        )
        log.warning("%s", problem)
        note = f"{note}; {problem}" if note else problem
    return dataclasses.replace(inventory, gpus=gpus, note=note)


def _indices(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)
