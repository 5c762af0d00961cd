"""The OpenAPI schema's patterns accept exactly what the validators accept."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpudock.api.routers.jobs import STATE_FILTER_PATTERN, parse_states
from gpudock.core import spec_schema as schema
from gpudock.core.errors import InvalidInput
from gpudock.core.job import JobSpec
from gpudock.services.events import TYPE_FILTER_PATTERN, parse_types

NASTY = st.sampled_from(
    ["", " ", "\n", "\u0131", "\u017f", "\u212a", ",", ".", "-", "=", ":", "*", "@", "_"]
)  # dotless i, long s and the Kelvin sign case-fold to ASCII letters


def texts(pattern: str) -> st.SearchStrategy[str]:
    """Strings near the pattern's edge: generated from it, mutated, or random."""
    base = st.from_regex(pattern, fullmatch=True)
    mutated = st.tuples(NASTY, base, NASTY).map("".join)
    return st.one_of(base, mutated, st.text(max_size=20)).filter(lambda s: "\x00" not in s)


def accepts(check: Callable[[str], object], value: str) -> bool:
    try:
        check(value)
    except (ValueError, ValidationError, InvalidInput):
        return False
    return True


CASES = {
    "name": (schema.NAME_PATTERN, lambda v: JobSpec(image="a", name=v)),
    "queue": (schema.NAME_PATTERN, lambda v: JobSpec(image="a", queue=v)),
    "label key": (schema.LABEL_KEY_ALLOWED_PATTERN, lambda v: JobSpec(image="a", labels={v: ""})),
    "toleration": (schema.TOLERATION_PATTERN, lambda v: JobSpec(image="a", tolerations=[v])),
    "state filter": (STATE_FILTER_PATTERN, lambda v: parse_states([v])),
    "event type filter": (TYPE_FILTER_PATTERN, lambda v: parse_types([v])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_schema_pattern_is_the_validation(case: str) -> None:
    pattern, check = CASES[case]

    @settings(max_examples=100, deadline=None)
    @given(texts(pattern))
    def agree(value: str) -> None:
        assert bool(re.search(pattern, value)) == accepts(check, value), repr(value)

    agree()


def test_env_keys_the_schema_allows_are_valid_names() -> None:
    for key in ("PATH", "NVIDIA_REQUIRE_CUDA", "NVIDIA_DRIVER_CAPABILITIES", "_x1"):
        assert re.search(schema.ENV_KEY_ALLOWED_PATTERN, key)
    for key in ("GPUDOCK_X", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_FOO", "CUDA_VISIBLE_DEVICES",
                "CUDA_MPS_PIPE_DIRECTORY", "1A"):  # fmt: skip
        assert not re.search(schema.ENV_KEY_ALLOWED_PATTERN, key)


def test_numbers_are_json_numbers() -> None:
    for bad in ({"gpus": True}, {"gpus": "2"}, {"cpus": "1.5"}, {"preemptible": 0}):
        with pytest.raises(ValidationError):
            JobSpec(image="a", **bad)  # type: ignore[arg-type]
    assert JobSpec(image="a", gpus=2.0, memory="8GiB").gpus == 2  # type: ignore[arg-type]
