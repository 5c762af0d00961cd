"""Image references are checked against Docker's grammar when a job is submitted."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from gpudock.core.image_ref import IMAGE_REFERENCE_PATTERN, check_image_reference
from gpudock.core.job import MAX_TEXT, JobSpec
from gpudock.core.units import MAX_SIZE, parse_size

VALID = [
    "busybox",
    "ubuntu:22.04",
    "gpudock-test/busybox:latest",
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "localhost:5000/team/img:1.0",
    "localhost/img",
    "registry:5000/img",
    "[::1]:5000/img",
    "Registry.Example.com/team/img",
    "foo__bar/baz.qux-1",
    "img@sha256:" + "a" * 64,
    "img:v1@sha256:" + "b" * 64,
]

INVALID = [
    ("Foo/bar", "lowercase"),
    ("team/Img", "lowercase"),
    ("UPPER", "lowercase"),
    ("img:-tag", "tag '-tag'"),
    ("img:" + "t" * 129, "tag"),
    ("img@sha256:zz", "digest 'sha256:zz'"),
    ("a:b:c", "not a valid Docker image reference"),
    ("foo-/x", "not a valid Docker image reference"),
    ("/img", "not a valid Docker image reference"),
    ("img/", "not a valid Docker image reference"),
    ("a b", "whitespace"),
    ("   ", "must not be empty"),
]


@pytest.mark.parametrize("image", VALID)
def test_references_docker_accepts_are_accepted(image: str) -> None:
    assert check_image_reference(image) == image
    assert re.fullmatch(IMAGE_REFERENCE_PATTERN, image), "the schema's pattern says the same"


@pytest.mark.parametrize(("image", "why"), INVALID)
def test_references_docker_refuses_are_refused_saying_why(image: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        check_image_reference(image)
    if image.strip():
        assert not re.fullmatch(IMAGE_REFERENCE_PATTERN, image)


def test_a_name_over_255_characters_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 255"):
        check_image_reference("a/" * 128 + "img")


def test_the_job_spec_checks_its_image() -> None:
    with pytest.raises(ValidationError, match="lowercase"):
        JobSpec(image="Team/img")


def test_sizes_given_as_strings_are_parsed_exactly() -> None:
    assert parse_size("9223372036854775807") == MAX_SIZE == parse_size(MAX_SIZE)
    assert parse_size("1.5GiB") == 3 * 2**29
    assert parse_size("0.1KB") == 100
    with pytest.raises(ValueError, match="too large"):
        parse_size("9223372036854775808")


@pytest.mark.parametrize(
    "spec",
    [
        {"command": ["x"] * 4097},
        {"env": {f"K{i}": "v" for i in range(1025)}},
        {"labels": {f"k{i}": "v" for i in range(65)}},
        {"command": ["x" * (MAX_TEXT + 1)]},
        {"env": {"K": "v" * (MAX_TEXT + 1)}},
    ],
    ids=["args", "env", "labels", "long-arg", "long-env-value"],
)
def test_command_env_and_labels_are_bounded(spec: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="at most"):
        JobSpec.model_validate({"image": "busybox", **spec})
