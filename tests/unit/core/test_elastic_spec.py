"""Elastic job specs: ``gpus: '2-4'`` or ``min_gpus``/``max_gpus``, stored as ``gpus`` (the
minimum) and ``max_gpus``; bad ranges are one clear line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpudock.core.elastic import size_env
from gpudock.core.job import Job, JobSpec, JobState


@pytest.mark.parametrize(
    "fields",
    [
        {"gpus": "2-4"},
        {"gpus": " 2 - 4 "},
        {"min_gpus": 2, "max_gpus": 4},
        {"gpus": 2, "max_gpus": 4},
    ],
)
def test_a_range_is_stored_as_its_minimum_and_maximum(fields: dict[str, object]) -> None:
    spec = JobSpec.model_validate({"image": "a", **fields})
    assert (spec.gpus, spec.max_gpus, spec.elastic_range) == (2, 4, (2, 4))
    assert "min_gpus" not in spec.model_dump()


def test_elastic_restart_is_kept_and_a_fixed_count_has_no_range() -> None:
    assert JobSpec(image="a", gpus="2-4", elastic="restart").elastic == "restart"  # type: ignore[arg-type]
    assert JobSpec(image="a", gpus=2).elastic_range is None
    assert JobSpec(image="a", gpus="3-3").elastic_range is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpus": "4-2"}, "min_gpus (4) must not be greater than max_gpus (2)"),
        ({"min_gpus": 4, "max_gpus": 2}, "min_gpus (4) must not be greater than max_gpus (2)"),
        ({"gpus": "0-2"}, "an elastic job needs at least 1 GPU"),
        ({"gpus": "2-4", "gpu_memory": "8GiB"}, "an elastic job takes whole GPUs"),
        ({"gpus": "2-4", "nodes": 2}, "an elastic job runs on one node"),
        ({"gpus": "2-4", "topology": "nvlink"}, "an elastic job cannot ask for topology"),
        ({"gpus": 2, "elastic": "restart"}, "elastic: restart needs a GPU range"),
        ({"gpus": "2-x"}, "gpus must be a number or a range such as '2-4'"),
        ({"gpus": "2-4", "min_gpus": 2}, "give gpus as a range ('2-4') or min_gpus and max_gpus"),
        ({"gpus": 3, "min_gpus": 2, "max_gpus": 4}, "give min_gpus or gpus (the minimum)"),
        ({"gpus": "2-4", "elastic": "grow"}, "Input should be 'restart'"),
    ],
)
def test_a_bad_range_is_refused_naming_the_problem(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"image": "a", **fields})
    assert message in str(refused.value)


def test_an_elastic_job_learns_its_size_from_world_size() -> None:
    spec = JobSpec(image="a", gpus="2-4")  # type: ignore[arg-type]
    job = Job(1, spec, "al", JobState.STARTING, 0.0, gpu_uuids=("G0", "G1", "G2"))
    assert size_env(spec.elastic_range, len(job.gpu_uuids)) == {"WORLD_SIZE": "3"}
    fixed = JobSpec(image="a", gpus=2)
    assert size_env(fixed.elastic_range, 2) == {}
