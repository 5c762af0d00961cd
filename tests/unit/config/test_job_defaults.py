"""``job_defaults``: what a job gets for the ``cpus`` and ``memory`` it leaves unset."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.config import load_config
from gpudock.core.errors import InvalidInput
from gpudock.core.job import JobSpec
from gpudock.core.job_defaults import JobDefaults, cpu_shortfall, with_defaults

GiB = 1024**3


def test_by_default_a_job_gets_one_cpu_and_2gib() -> None:
    spec = with_defaults(JobSpec(image="img"), load_config(None).job_defaults)
    assert (spec.cpus, spec.memory) == (1.0, 2 * GiB)


def test_what_the_job_sets_is_kept() -> None:
    defaults = JobDefaults()
    spec = JobSpec(image="img", cpus=4, memory="8GiB")
    assert with_defaults(spec, defaults) is spec
    half = with_defaults(JobSpec(image="img", memory="8GiB"), defaults)
    assert (half.cpus, half.memory) == (1.0, 8 * GiB)


def test_the_defaults_are_configurable_and_null_turns_one_off(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("job_defaults: {cpus: 0.5, memory: null}\n")
    defaults = load_config(path).job_defaults
    spec = with_defaults(JobSpec(image="img"), defaults)
    assert (spec.cpus, spec.memory) == (0.5, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_defaults: {cpus: 0}", "job_defaults.cpus: Input should be greater than 0"),
        ("job_defaults: {memory: 1MiB}", "job_defaults.memory: memory must be at least 6MiB"),
        ("job_defaults: {memory: lots}", "job_defaults.memory: expected a size"),
        ("job_defaults: {gpus: 1}", "job_defaults.gpus: unknown field"),
        ("node: {memory: 10}", "node.memory: memory must be at least 1KiB"),
    ],
)
def test_bad_defaults_are_refused_by_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(InvalidInput, match=message):
        load_config(path)


def test_node_memory_accepts_sizes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("node: {cpus: 8, memory: 64GiB}\n")
    node = load_config(path).node
    assert (node.cpus, node.memory) == (8.0, 64 * GiB)
    assert load_config(None).node.memory is None


def test_a_node_with_fewer_cpus_than_its_gpus_need_under_the_defaults_is_named() -> None:
    defaults = JobDefaults()
    assert cpu_shortfall(8, 2.0, defaults) == (
        "8 GPUs but 2 CPUs: at most 2 one-GPU jobs at once (job_defaults.cpus is 1); "
        "set job_defaults.cpus or node.cpus"
    )
    assert cpu_shortfall(8, 8.0, defaults) is None
    assert cpu_shortfall(8, 2.0, JobDefaults(cpus=0.25)) is None  # 8 jobs of a quarter core
    assert "at most 4 one-GPU jobs" in str(cpu_shortfall(8, 2.0, JobDefaults(cpus=0.5)))
    assert cpu_shortfall(3, 0.3, JobDefaults(cpus=0.1)) is None  # 0.3 / 0.1 is 3, not 2.99
    assert cpu_shortfall(8, 2.0, JobDefaults(cpus=None)) is None  # jobs take no CPUs
    assert cpu_shortfall(8, None, defaults) is None  # the node does not count CPUs
    assert cpu_shortfall(0, 2.0, defaults) is None  # no GPUs, nothing idles
