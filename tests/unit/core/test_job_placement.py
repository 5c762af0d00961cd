"""JobSpec placement constraints: node_selector, tolerations and topology."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpudock.config import format_validation_error
from gpudock.core.job import JobSpec


def error(**fields: Any) -> str:
    """The one-line message a user sees for a spec with ``fields`` (API and CLI alike)."""
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"image": "img", **fields})
    return format_validation_error(caught.value)


def test_no_constraints_by_default() -> None:
    spec = JobSpec(image="img")
    assert (spec.node_selector, spec.tolerations, spec.topology) == ({}, [], None)


def test_node_selector_as_a_mapping_or_key_value_strings() -> None:
    as_map = JobSpec.model_validate({"image": "img", "node_selector": {"zone": "b", "gpu": "h"}})
    as_list = JobSpec.model_validate({"image": "img", "node_selector": ["zone=b", "gpu=h"]})

    assert as_map.node_selector == as_list.node_selector == {"gpu": "h", "zone": "b"}
    assert list(as_map.node_selector) == ["gpu", "zone"]  # stored sorted


def test_tolerations_are_stored_canonically_without_repeats() -> None:
    spec = JobSpec.model_validate(
        {
            "image": "img",
            "tolerations": [" dedicated=ml ", "spot", "dedicated=ml", "gpu:NoSchedule", "*"],
        }
    )
    assert spec.tolerations == ["dedicated=ml", "spot", "gpu:NoSchedule", "*"]


@pytest.mark.parametrize("topology", ["nvlink", "numa"])
def test_topology_is_nvlink_or_numa(topology: str) -> None:
    assert JobSpec.model_validate({"image": "img", "gpus": 8, "topology": topology}).topology == (
        topology
    )


@pytest.mark.parametrize("gpus", [0, 1])
def test_topology_with_fewer_than_two_gpus_is_accepted_as_trivially_met(gpus: int) -> None:
    assert JobSpec(image="img", gpus=gpus, topology="nvlink").topology == "nvlink"


def test_the_spec_round_trips_through_json() -> None:
    spec = JobSpec.model_validate(
        {
            "image": "img",
            "gpus": 4,
            "node_selector": ["zone=b"],
            "tolerations": ["spot:NoSchedule"],
            "topology": "numa",
        }
    )
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"node_selector": {"bad key": "x"}},
            "node_selector: label key 'bad key' must be 1-63 letters, digits or '_./-', "
            "starting and ending with a letter or digit",
        ),
        (
            {"node_selector": {"zone": "a b"}},
            "node_selector: label value 'a b' for 'zone' must be at most 63 letters, digits "
            "or '_.-', starting and ending with a letter or digit",
        ),
        (
            {"node_selector": ["zone"]},
            "node_selector: node selector 'zone' must look like key=value",
        ),
        (
            {"node_selector": ["zone=a", "zone=b"]},
            "node_selector: node selector names label key 'zone' twice",
        ),
        ({"node_selector": {"rack": 3}}, "node_selector.rack: Input should be a valid string"),
        ({"node_selector": "zone=a"}, "node_selector: Input should be a valid dictionary"),
        (
            {"tolerations": ["spot:NoExecute"]},
            "tolerations: toleration 'spot:NoExecute': effect must be NoSchedule, got "
            "'NoExecute' (gpudock never evicts running jobs for taints)",
        ),
        (
            {"tolerations": ["ok", "bad key"]},
            "tolerations: toleration 'bad key': label key 'bad key' must be 1-63 letters, "
            "digits or '_./-', starting and ending with a letter or digit",
        ),
        (
            {"tolerations": ["*=x"]},
            "tolerations: toleration '*=x': '*' tolerates every taint and takes no value",
        ),
        ({"tolerations": ["spot:"]}, "tolerations: toleration 'spot:': empty effect after ':'"),
        ({"tolerations": "spot"}, "tolerations: Input should be a valid list"),
        ({"topology": "pcie"}, "topology: Input should be 'nvlink' or 'numa'"),
    ],
)
def test_bad_constraints_name_the_field_and_the_entry(fields: dict[str, Any], message: str) -> None:
    assert error(**fields) == message
