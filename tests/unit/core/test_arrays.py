"""Job arrays' spelling (``core/arrays.py``) and the JobSpec fields for arrays and
dependencies."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpudock.core.arrays import ArrayRange, array_env, parse_array
from gpudock.core.job import JobSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-99%8", ArrayRange(0, 99, 8)), ("3-5", ArrayRange(3, 5)), ("7", ArrayRange(7, 7))],
)
def test_array_ranges_parse(text: str, expected: ArrayRange) -> None:
    assert parse_array(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5-1", "array '5-1': the first index 5 exceeds the last 1"),
        ("0-9%0", "the limit after % must be at least 1"),
        ("a-b", "must look like FIRST-LAST[%LIMIT]"),
        (" 1-2", "must look like FIRST-LAST[%LIMIT]"),
        ("-1-2", "must look like FIRST-LAST[%LIMIT]"),
    ],
)
def test_bad_array_ranges_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("%", "%")):
        parse_array(text)
    with pytest.raises(ValidationError, match="array"):
        JobSpec(image="busybox", array=text)


def test_size_indices_and_env() -> None:
    array = parse_array("10-14%2")
    assert (array.size, list(array.indices())) == (5, [10, 11, 12, 13, 14])
    assert array_env(40, 3) == {"GPUDOCK_ARRAY_ID": "40", "GPUDOCK_ARRAY_INDEX": "3"}
    assert array_env(None, None) == {}


def test_dependencies_are_job_ids_kept_once_in_order() -> None:
    spec = JobSpec(image="busybox", after=[3, 1, 3], after_ok=[2])
    assert (spec.after, spec.after_ok) == ([3, 1], [2])
    for bad in (["3"], [0], [True], [2**31]):
        with pytest.raises(ValidationError, match="after"):
            JobSpec(image="busybox", after=bad)
