"""A job's mounts in gpudock's spelling and in Docker's ``--mount`` spelling."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpudock.core.job import JobSpec
from gpudock.core.mount_forms import canonical_mount


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("/data:/data", "/data:/data"),  # gpudock's own form stays as written
        ("/data:/data:rw", "/data:/data:rw"),
        ("type=bind,src=/data,dst=/d,readonly", "/data:/d:ro"),
        ("type=bind,source=/data,target=/d", "/data:/d:rw"),  # Docker: read-write by default
        ("type=bind,source=/data,destination=/d,ro", "/data:/d:ro"),
        ("src=/data,dst=/d,readonly=true", "/data:/d:ro"),  # type may be left out
        ("type=bind,src=/data,dst=/d,readonly=false", "/data:/d:rw"),
        ("type=bind,src=/data,dst=/d,ro=1", "/data:/d:ro"),
        ("TYPE=bind, SRC=/data, DST=/d, READONLY", "/data:/d:ro"),
    ],
)
def test_both_spellings_are_stored_in_gpudocks_form(written: str, stored: str) -> None:
    assert canonical_mount(written) == stored
    assert JobSpec(image="img", mounts=[written]).mounts == [stored]


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("type=volume,src=cache,dst=/d", "type must be 'bind'"),
        ("type=bind,src=/data", "a target (dst=) is required"),
        ("type=bind,dst=/d", "a source (src=) is required"),
        ("type=bind,src=/a,source=/b,dst=/d", "'source' and 'src' say the same"),
        ("type=bind,src=/a,dst=/d,bind-propagation=rshared",
         "unsupported option 'bind-propagation'"),
        ("type=bind,src=/a,dst=/d,readonly=maybe", "readonly must be true or false"),
        ("type=bind,src=data,dst=/d", "both paths must be absolute"),
        ("type=bind,src=/a,,dst=/d", "empty item"),
        ("type=bind,src=/a,src=/b,dst=/d", "'src' is given twice"),
    ],
)  # fmt: skip
def test_a_bad_docker_form_is_one_line_naming_the_mount_as_written(
    written: str, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec(image="img", mounts=[written])

    (error,) = caught.value.errors()
    assert message in error["msg"] and repr(written) in error["msg"]
