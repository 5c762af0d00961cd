"""The GPU emulator: spec grammar, error messages, stable UUIDs and model matching."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudock.core.inventory import GpuHealth, gpu_model_matches
from gpudock.gpus import EmulatedGpus, discover, emulated_inventory, parse_emulation_spec

GIB = 1024**3
MIB = 1024**2
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("4xH100-80GB", [EmulatedGpus(4, "H100", 80 * GIB)]),
        ("H100-80GB", [EmulatedGpus(1, "H100", 80 * GIB)]),
        (
            "2xA100-40GB,2xT4-16GB",
            [EmulatedGpus(2, "A100", 40 * GIB), EmulatedGpus(2, "T4", 16 * GIB)],
        ),
        (
            " 2 X a100 - 40 gb , t4-16GiB ",
            [EmulatedGpus(2, "A100", 40 * GIB), EmulatedGpus(1, "T4", 16 * GIB)],
        ),
        ("1xA100-SXM4-80GB", [EmulatedGpus(1, "A100-SXM4", 80 * GIB)]),
        ("2xMIG.test-512MiB", [EmulatedGpus(2, "MIG.TEST", 512 * MIB)]),
        ("8xL4-24576MiB", [EmulatedGpus(8, "L4", 24 * GIB)]),
        ("2x4090-24GB", [EmulatedGpus(2, "4090", 24 * GIB)]),
        ("H200-141GB", [EmulatedGpus(1, "H200", 141 * GIB)]),
        ("B200-0.5TB", [EmulatedGpus(1, "B200", 512 * GIB)]),
    ],
)
def test_parses_valid_specs(spec: str, expected: list[EmulatedGpus]) -> None:
    assert parse_emulation_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("4xH100", "item 1 '4xH100': missing the memory size after the model"),
        ("0xH100-80GB", "item 1 '0xH100-80GB': the count must be at least 1"),
        ("4xH100-80XB", "item 1 '4xH100-80XB': unknown memory unit 'XB'"),
        ("H100-80", "memory '80' must be a number with a unit"),
        ("H100-0GB", "the memory size must be positive"),
        ("4x-80GB", "missing the model name"),
        ("2xA100-40GB,,T4-16GB", "item 2 (empty): nothing between the commas"),
        ("2xA100-40GB,T4", "item 2 'T4': missing the memory size"),
        ("RTX 4090-24GB", "model 'RTX 4090' may only contain"),
        ("65xH100-80GB", "asks for 65 GPUs; at most 64 per node"),
    ],
)
def test_rejects_bad_specs_naming_the_item_and_an_example(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_emulation_spec(spec)
    message = str(caught.value)
    assert fragment in message
    if "asks for" not in message:
        assert "e.g. 4xH100-80GB" in message


@pytest.mark.parametrize("spec", ["", "   ", "\n"])
def test_rejects_an_empty_spec(spec: str) -> None:
    with pytest.raises(
        ValueError, match=r"^empty GPU emulation spec; expected NxMODEL-MEMORY, e\.g\. "
    ):
        parse_emulation_spec(spec)


def test_inventory_lists_gpus_in_spec_order_with_emulated_metadata() -> None:
    inventory = emulated_inventory("node-a", "2xA100-40GB,1xT4-16GB")

    assert inventory.name == "node-a"
    assert inventory.source == "emulated"
    assert inventory.driver_version is None and inventory.cuda_version is None
    assert inventory.note == "emulating 3 GPUs: 2xA100-40GB,1xT4-16GB"
    assert [g.index for g in inventory.gpus] == [0, 1, 2]
    assert [g.name for g in inventory.gpus] == [
        "NVIDIA A100-40GB (emulated)",
        "NVIDIA A100-40GB (emulated)",
        "NVIDIA T4-16GB (emulated)",
    ]
    assert [g.memory_total for g in inventory.gpus] == [40 * GIB, 40 * GIB, 16 * GIB]
    for gpu in inventory.gpus:
        assert gpu.emulated is True
        assert gpu.mig_mode is False
        assert gpu.health is GpuHealth.OK
        assert UUID_RE.match(gpu.uuid), gpu.uuid


def test_uuids_are_stable_across_calls_and_differ_per_node_and_index() -> None:
    first = emulated_inventory("node-a", "4xH100-80GB")
    again = emulated_inventory("node-a", " 4 x h100-80GB ")
    other_node = emulated_inventory("node-b", "4xH100-80GB")

    uuids = [g.uuid for g in first.gpus]
    assert uuids == [g.uuid for g in again.gpus]
    assert len(set(uuids)) == 4
    assert not set(uuids) & {g.uuid for g in other_node.gpus}
    # Pinned: a change here would re-identify every emulated GPU in existing stores.
    assert uuids[0] == "GPU-e0137855-6778-5b80-91d7-416b9ce934eb"


@pytest.mark.parametrize(
    ("wanted", "matches"),
    [
        ("H100", True),
        ("h100", True),
        ("H100-80GB", True),
        ("nvidia h100", True),
        ("A100", False),
        ("H200", False),
    ],
)
def test_names_match_job_gpu_models(wanted: str, matches: bool) -> None:
    (gpu,) = emulated_inventory("node-a", "H100-80GB").gpus
    assert gpu_model_matches(wanted, gpu.name) is matches


def test_discover_with_emulate_uses_the_emulator() -> None:
    inventory = discover("node-a", emulate="2xT4-16GB")
    assert inventory.source == "emulated"
    assert len(inventory.gpus) == 2


def test_discover_with_a_bad_emulate_spec_raises() -> None:
    with pytest.raises(ValueError, match="unknown memory unit"):
        discover("node-a", emulate="2xT4-16XB")


_models = st.from_regex(r"[A-Z][A-Z0-9]{0,5}", fullmatch=True)
_items = st.tuples(st.integers(1, 8), _models, st.integers(1, 200))


@given(st.lists(_items, min_size=1, max_size=4))
def test_any_rendered_spec_round_trips(items: list[tuple[int, str, int]]) -> None:
    spec = ",".join(f"{n}x{model}-{mem}GB" for n, model, mem in items)
    parsed = parse_emulation_spec(spec)
    assert parsed == [EmulatedGpus(n, model, mem * GIB) for n, model, mem in items]
    inventory = emulated_inventory("node-x", spec)
    assert len(inventory.gpus) == sum(n for n, _, _ in items)
    assert len({g.uuid for g in inventory.gpus}) == len(inventory.gpus)
