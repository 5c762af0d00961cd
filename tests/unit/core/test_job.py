"""JobSpec validation, units and the job state machine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpudock.core.errors import IllegalTransition
from gpudock.core.job import (
    TRANSITIONS,
    JobSpec,
    JobState,
    check_transition,
    container_name,
    job_of_container,
    parse_mount,
)
from gpudock.core.units import format_duration, format_size, parse_duration, parse_size

GIB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20GiB", 20 * GIB),
        ("16GB", 16 * 10**9),
        ("512m", 512 * 1024**2),
        ("1024", 1024),
        (" 1.5 GiB ", int(1.5 * GIB)),
        (4096, 4096),
    ],
)
def test_sizes_parse(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["20XB", "", "GiB", "-1GiB", "1 2GiB"])
def test_bad_sizes_name_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), [1], {}, None, 2**63, "9" * 30])
def test_sizes_that_are_not_finite_numbers_or_too_large_raise_value_error(value: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", ["nan", "inf", "-inf", "1e999", float("nan"), float("inf"), [1], None]
)
def test_durations_that_are_not_finite_numbers_raise_value_error(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1d", 86400)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "2x", "h", "1h 2", "-5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_formatting() -> None:
    assert format_size(20 * GIB) == "20GiB" and format_size(1536) == "1.5KiB"
    assert format_duration(5400) == "1h30m" and format_duration(42) == "42s"


def test_spec_normalises_sizes_and_durations() -> None:
    spec = JobSpec(image="img", gpus=2, gpu_memory="20GiB", max_runtime="2h", memory="8GiB")
    assert (spec.gpu_memory, spec.max_runtime, spec.memory) == (20 * GIB, 7200.0, 8 * GIB)
    assert spec.shared and not JobSpec(image="img", gpus=2).shared


def test_what_a_restart_costs_a_job_is_a_duration() -> None:
    spec = JobSpec(image="img", restart_cost="2m", checkpoint_interval="30m")
    assert (spec.restart_cost, spec.checkpoint_interval) == (120.0, 1800.0)
    assert JobSpec(image="img", restart_cost=0).restart_cost == 0.0  # restarts are free


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpus": -1}, "greater than or equal to 0"),
        ({"image": ""}, "image must not be empty"),
        ({"gpu_memory": "20XB"}, "unknown size unit 'XB'"),
        ({"gpu_memory": 0}, "greater than zero"),
        ({"queue": "bad queue"}, "queue must be"),
        ({"env": {"1BAD": "x"}}, "not a valid variable name"),
        ({"labels": {"gpudock.job": "1"}}, "must not start with 'gpudock.'"),
        ({"mounts": ["relative:/x"]}, "must be absolute"),
        ({"mounts": ["/a:/b:rx"]}, "mode must be"),
        ({"privileged": True}, "Extra inputs are not permitted"),
        ({"retries": 1000}, "less than or equal to 100"),
        ({"memory": 8}, "at least 6MiB"),
        ({"memory": float("inf")}, "size must be a finite number"),
        ({"gpu_memory": [1]}, "expected a size"),
        ({"max_runtime": "nan"}, "duration must be a finite number"),
        ({"cpus": float("nan")}, "finite number"),
        ({"image": "a\x00b"}, r"image must not contain NUL"),
        ({"command": ["a\x00"]}, r"command must not contain NUL"),
        ({"env": {"A": "\x00"}}, r"env must not contain NUL"),
        ({"gpu_model": "H100\x00"}, r"gpu_model must not contain NUL"),
        ({"queue": "default\n"}, "queue must be"),
        ({"name": "x\n"}, "name must be"),
        ({"env": {"A\n": "1"}}, "not a valid variable name"),
        ({"labels": {"a\n": "1"}}, "label key"),
        ({"node_selector": {"zone": "eu\n"}}, "label value"),
        ({"restart_cost": -5}, "duration must not be negative"),
        ({"restart_cost": "8d"}, "restart_cost must be at most 7 days"),
        ({"restart_cost": True}, "restart_cost must be a duration, not True"),
        ({"checkpoint_interval": 0}, "checkpoint_interval must be greater than zero"),
        ({"checkpoint_interval": "often"}, "expected a duration"),
        ({"gpus": 1, "gpu_memory": "4GiB", "gpu_compute": 0}, "percentage from 1 to 100, got 0"),
        ({"gpus": 1, "gpu_memory": "4GiB", "gpu_compute": 101}, "from 1 to 100, got 101"),
        ({"gpus": 1, "gpu_memory": "4GiB", "gpu_compute": True}, "must be a number"),
        ({"gpus": 1, "gpu_memory": "4GiB", "gpu_compute": "50"}, "must be a number"),
        ({"gpus": 1, "gpu_compute": 50}, "gpu_compute is the compute share of a shared job"),
        ({"mig": "big"}, "'big' is not a MIG profile name"),
        ({"mig": "1g.10gb", "gpus": 2}, "cannot be combined with gpus: 2"),
        ({"mig": "1g.10gb", "gpus": 0}, "cannot be combined with gpus: 0"),
        ({"mig": "1g.10gb", "gpus": 1, "gpu_memory": "4GiB"}, "has its own memory"),
        ({"mig": "1g.10gb", "nodes": 2}, "leave max_gpus and nodes out"),
        ({"mig": "1g.10gb", "gpus": "1-2"}, "leave max_gpus and nodes out"),
    ],
)
def test_spec_rejects_bad_input(fields: dict[str, object], message: str) -> None:
    data: dict[str, object] = {"image": "img", **fields}
    with pytest.raises(ValidationError, match=message):
        JobSpec.model_validate(data)


def test_a_mig_job_holds_one_device() -> None:
    spec = JobSpec(image="img", mig="1g.10gb")
    assert (spec.gpus, spec.shared, spec.mig) == (1, False, "1g.10gb")


def test_mounts() -> None:
    mount = parse_mount("/data/x:/x:ro")
    assert (mount.host, mount.container, mount.read_only) == ("/data/x", "/x", True)
    assert parse_mount("/data/x:/x").read_only  # read-only unless it says :rw
    assert not parse_mount("/data/x:/x:rw").read_only


def test_every_terminal_state_is_final_and_needs_a_reason() -> None:
    for state in JobState:
        if state.terminal:
            assert TRANSITIONS[state] == frozenset()
            with pytest.raises(IllegalTransition):
                check_transition(state, JobState.PENDING)
    with pytest.raises(IllegalTransition, match="needs a reason"):
        check_transition(JobState.RUNNING, JobState.FAILED, None)
    check_transition(JobState.RUNNING, JobState.FAILED, "exited with code 1")


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.STARTING),
        (JobState.ALLOCATED, JobState.RUNNING),
        (JobState.RUNNING, JobState.ALLOCATED),
    ],
)
def test_illegal_transitions(current: JobState, target: JobState) -> None:
    with pytest.raises(IllegalTransition, match=f"from {current} to {target}"):
        check_transition(current, target, "x")


@pytest.mark.parametrize(
    ("instance", "name", "expected"),
    [
        ("inst", container_name("inst", 42, 3), 42),
        ("in-st-a1", container_name("in-st-a1", 7, 0), 7),
        ("inst", "gpudock-other-42-a3", None),
        ("inst", "gpudock-inst-42", None),
        ("inst", "gpudock-inst-x-a1", None),
        ("inst", "gpudock-inst-42-ab", None),
        ("inst", "someone-else", None),
    ],
)
def test_the_job_of_a_container_is_read_back_from_its_name(
    instance: str, name: str, expected: int | None
) -> None:
    assert job_of_container(instance, name) == expected
