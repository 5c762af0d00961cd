"""Emulated GPUs: a node inventory from a spec such as ``4xH100-80GB``.

Used for demos, tests and CPU-only development hosts. The grammar is a
comma-separated list of items ``[N x]MODEL-MEMORY``:

* ``N`` is an optional count (default 1), followed by ``x`` or ``X``;
* ``MODEL`` is letters, digits, ``.``, ``_`` and ``-`` (``A100-SXM4`` is fine);
* ``MEMORY`` is the text after the last ``-``: a number with a unit. ``GB``,
  ``MB`` and ``TB`` mean GiB, MiB and TiB, as in NVIDIA's product names;
  ``GiB``, ``MiB`` and ``TiB`` are accepted too.

Whitespace around tokens is ignored. Emulated GPUs get stable UUIDs: the same
spec on the same node name yields the same UUIDs after every restart.

Emulated topology, like a typical HGX/DGX box: the GPUs of one item with a
count of 2 or more form one NVLink domain (items numbered 0, 1, ... in spec
order; a lone GPU has none), and a node with 4 or more GPUs has two NUMA
nodes, the first half of the GPUs on node 0 and the rest on node 1 (fewer
GPUs: all on node 0). ``8xH100-80GB`` is one NVLink domain over two NUMA
nodes of four GPUs. The server config's ``node.topology`` overrides either.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import NamedTuple

from gpudock.core.inventory import GpuInfo, NodeInventory
from gpudock.core.units import parse_size

EXAMPLE = "e.g. 4xH100-80GB or 2xA100-40GB,2xT4-16GB"
MAX_EMULATED_GPUS = 64

# Fixed forever: changing it would change every emulated GPU's UUID.
_UUID_NAMESPACE = uuid.UUID("5d0c3a52-6f53-4a37-9f0e-6b8f1f2e9a41")
_COUNT_RE = re.compile(r"^(\d+)\s*[xX]\s*(.*)$")
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z]+)$")
_UNITS = {"gb": "GiB", "mb": "MiB", "tb": "TiB", "gib": "GiB", "mib": "MiB", "tib": "TiB"}


class EmulatedGpus(NamedTuple):
    """One spec item: ``quantity`` GPUs of ``model`` (upper case) with ``memory`` bytes each."""

    quantity: int
    model: str
    memory: int


def parse_emulation_spec(text: str) -> list[EmulatedGpus]:
    """Parse ``text`` into its items, in order.

    Raises ``ValueError`` naming the offending item and showing an example when
    the spec is empty, an item is malformed, a count is 0, or the total exceeds
    ``MAX_EMULATED_GPUS``. Pure; never touches the host.
    """
    if not text.strip():
        raise ValueError(f"empty GPU emulation spec; expected NxMODEL-MEMORY, {EXAMPLE}")
    items = [_parse_item(item, position) for position, item in enumerate(text.split(","), 1)]
    total = sum(item.quantity for item in items)
    if total > MAX_EMULATED_GPUS:
        raise ValueError(
            f"GPU emulation spec {text.strip()!r} asks for {total} GPUs; "
            f"at most {MAX_EMULATED_GPUS} per node"
        )
    return items


def emulated_inventory(node_name: str, spec: str) -> NodeInventory:
    """Return an inventory of the GPUs that ``spec`` describes, on ``node_name``.

    GPUs are indexed 0.. in spec order, with the emulated topology the module
    docstring describes. Each is named ``NVIDIA <MODEL>-<MEM>
    (emulated)`` so ``gpu_model_matches("H100", name)`` holds for an H100 item,
    and gets the UUID ``emulated_gpu_uuid(node_name, index, model)``. Raises
    ``ValueError`` as ``parse_emulation_spec`` does.
    """
    items = parse_emulation_spec(spec)
    total = sum(item.quantity for item in items)
    gpus: list[GpuInfo] = []
    domains = 0
    for item in items:
        nvlink = domains if item.quantity >= 2 else None
        domains += nvlink is not None
        for _ in range(item.quantity):
            index = len(gpus)
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=emulated_gpu_uuid(node_name, index, item.model),
                    name=f"NVIDIA {item.model}-{_memory_label(item.memory)} (emulated)",
                    memory_total=item.memory,
                    mig_mode=False,
                    emulated=True,
                    numa=index * 2 // total if total >= 4 else 0,
                    nvlink=nvlink,
                )
            )
    summary = ",".join(f"{i.quantity}x{i.model}-{_memory_label(i.memory)}" for i in items)
    return NodeInventory(
        name=node_name,
        gpus=tuple(gpus),
        source="emulated",
        note=f"emulating {len(gpus)} GPUs: {summary}",
    )


def emulated_gpu_uuid(node_name: str, index: int, model: str) -> str:
    """A stable, real-looking UUID (``GPU-xxxxxxxx-...``) for one emulated GPU."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/{index}/{model}')}"


def _parse_item(raw: str, position: int) -> EmulatedGpus:
    """Parse one ``[N x]MODEL-MEMORY`` item; ``position`` (1-based) is for errors."""
    item = raw.strip()

    def bad(problem: str) -> ValueError:
        where = f"item {position} {item!r}" if item else f"item {position} (empty)"
        return ValueError(
            f"invalid GPU emulation {where}: {problem}; expected NxMODEL-MEMORY, {EXAMPLE}"
        )

    if not item:
        raise bad("nothing between the commas")
    count, rest = 1, item
    if match := _COUNT_RE.match(item):
        count, rest = int(match.group(1)), match.group(2)
        if count < 1:
            raise bad("the count must be at least 1")
    model, dash, memory_text = rest.rpartition("-")
    model, memory_text = model.strip(), memory_text.strip()
    if not dash:
        raise bad("missing the memory size after the model, such as -80GB")
    if not model:
        raise bad("missing the model name before the memory size")
    if not _MODEL_RE.match(model):
        raise bad(f"model {model!r} may only contain letters, digits, '.', '_' and '-'")
    return EmulatedGpus(count, model.upper(), _parse_memory(memory_text, bad))


def _parse_memory(text: str, bad: Callable[[str], ValueError]) -> int:
    """Bytes for ``80GB``/``40GiB``/``512MiB``; GB, MB and TB are binary here."""
    match = _MEMORY_RE.match(text)
    if not match:
        raise bad(f"memory {text!r} must be a number with a unit such as GB, GiB or MiB")
    number, unit = match.groups()
    binary_unit = _UNITS.get(unit.lower())
    if binary_unit is None:
        raise bad(f"unknown memory unit {unit!r}; use GB, GiB, MB, MiB, TB or TiB")
    size = parse_size(f"{number}{binary_unit}")
    if size <= 0:
        raise bad("the memory size must be positive")
    return size


def _memory_label(memory: int) -> str:
    """``80 GiB`` -> ``80GB`` (NVIDIA style); falls back to MB, then bytes."""
    for unit, label in ((1024**3, "GB"), (1024**2, "MB")):
        if memory % unit == 0:
            return f"{memory // unit}{label}"
    return f"{memory}B"
