"""Jobs beyond a cycle's window of pending jobs say why they wait (real dockerd,
in-process runtime, a window of 2 instead of 5000)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, cleanup_containers

from gpudock.config import ServerConfig
from gpudock.core.job import JobSpec, JobState
from gpudock.runtime import controller
from gpudock.server import Server, build_server
from gpudock.services.job_controls import JobControls
from gpudock.store.tokens import Principal

pytestmark = pytest.mark.docker

ADMIN = Principal(user="admin", is_admin=True)


@pytest.fixture
def server(tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setattr(controller, "MAX_PENDING_PER_CYCLE", 2)
    server = build_server(tmp_path, ServerConfig(), emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    cleanup_containers(docker_api, f"gpudock.instance={server.ctx.instance_id}")


def layers(controls: JobControls, job_id: int) -> list[str]:
    return [r.layer for r in controls.get(job_id, ADMIN).pending_reasons]


def test_jobs_beyond_the_window_get_a_backlog_reason_and_keep_better_ones(
    server: Server,
) -> None:
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
