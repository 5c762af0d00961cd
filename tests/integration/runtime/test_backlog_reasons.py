"""Jobs beyond a cycle's window of pending jobs say why they wait, and GPU jobs behind
a CPU-only backlog still get idle GPUs (real dockerd, in-process runtime, a window of
2 instead of 5000)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, cleanup_containers

from gpudock.config import ServerConfig
from gpudock.core.job import JobSpec, JobState
from gpudock.core.job_defaults import JobDefaults
from gpudock.runtime import controller
from gpudock.server import Server, build_server
from gpudock.services.job_controls import JobControls
from gpudock.store.tokens import Principal

pytestmark = pytest.mark.docker

ADMIN = Principal(user="admin", is_admin=True)


@pytest.fixture
def server(tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """One emulated GPU; jobs take no CPUs or memory unless they ask (only GPUs bind)."""
    monkeypatch.setattr(controller, "MAX_PENDING_PER_CYCLE", 2)
    config = ServerConfig(job_defaults=JobDefaults(cpus=None, memory=None))
    server = build_server(tmp_path, config, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    cleanup_containers(docker_api, f"gpudock.instance={server.ctx.instance_id}")


def layers(controls: JobControls, job_id: int) -> list[str]:
    return [r.layer for r in controls.get(job_id, ADMIN).pending_reasons]


def test_jobs_beyond_the_window_get_a_backlog_reason_and_keep_better_ones(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller, "GPU_PENDING_PER_CYCLE", 0)  # no GPU jobs beyond it
    controls = JobControls(server.ctx)
    spec = JobSpec(image=TEST_IMAGE, command=["sleep", "60"], gpus=1)
    runs, waits, beyond, held = (controls.submit(spec, ADMIN).id for _ in range(4))
    controls.hold(held, ADMIN)

    server.controller.schedule_once()  # window: runs (placed) and waits

    assert controls.get(runs, ADMIN).state is not JobState.PENDING
    assert set(layers(controls, waits)) == {"devices"}
    assert layers(controls, beyond) == ["backlog"]
    assert "first 2 pending jobs" in controls.get(beyond, ADMIN).pending_reasons[0].message
    assert layers(controls, held) == ["hold"]  # `gpudock hold` said why; the backlog keeps it

    controls.cancel(waits, ADMIN)
    server.controller.schedule_once()  # now inside the window: its real reason replaces it

    assert set(layers(controls, beyond)) == {"devices"}


def test_a_gpu_job_behind_a_full_window_of_cpu_jobs_takes_the_idle_gpu_at_once(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller, "GPU_PENDING_PER_CYCLE", 1)
    controls = JobControls(server.ctx)
    cpu_only = JobSpec(image=TEST_IMAGE, command=["sleep", "60"], gpus=0)
    cpu_first, cpu_second, cpu_beyond = (controls.submit(cpu_only, ADMIN).id for _ in range(3))
    one_gpu = JobSpec(image=TEST_IMAGE, command=["sleep", "60"], gpus=1)
    gpu_job, gpu_beyond_share = (controls.submit(one_gpu, ADMIN).id for _ in range(2))

    placed = {p.job_id for p in server.controller.schedule_once().committed}

    assert placed == {cpu_first, cpu_second, gpu_job}, "the GPU job beyond the window ran"
    assert layers(controls, cpu_beyond) == ["backlog"]
    assert layers(controls, gpu_beyond_share) == ["backlog"]  # the GPU share is 1 job here
    message = controls.get(cpu_beyond, ADMIN).pending_reasons[0].message
    assert "first 2 pending jobs" in message and "first 1 further back" in message


def test_a_gpu_job_behind_cpu_jobs_on_a_small_host_says_the_cpus_bind(
    tmp_path: Path, docker_api: Any
) -> None:
    """The default 1 CPU per job, on a node of 2 cores: a correct wait, and `why` says so."""
    config = ServerConfig.model_validate({"node": {"cpus": 2, "memory": "64GiB"}})
    server = build_server(tmp_path, config, emulate_gpus="2xH100-80GB")
    try:
        controls = JobControls(server.ctx)
        cpu_only = JobSpec(image=TEST_IMAGE, command=["sleep", "60"], gpus=0)
        for _ in range(3):
            controls.submit(cpu_only, ADMIN)
        gpu_job = controls.submit(JobSpec(image=TEST_IMAGE, gpus=1), ADMIN).id

        server.controller.schedule_once()

        reasons = controls.get(gpu_job, ADMIN).pending_reasons
        assert reasons[0].layer == "devices"
        assert reasons[0].message == "needs 1 CPUs; the most free on one node is 0 (" + (
            server.ctx.node_name + ")"
        )
    finally:
        server.ctx.shutdown()
        cleanup_containers(docker_api, f"gpudock.instance={server.ctx.instance_id}")
