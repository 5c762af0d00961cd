"""The reconciler's orphan step against a real dockerd (step 4 of ``reconciler.py``).

A pass lists the containers, then asks the store which jobs still claim
them. A job that ends in between (its container exits, its finisher removes
it) leaves the pass with a listing that says "running" for a container no
active job claims (or, while the finisher's removal runs, ``removing``): that
is a finished job, not an orphan to warn about.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, cleanup_containers
from tests.kit.server import wait_for

from gpudock.config import ServerConfig
from gpudock.executors.base import ContainerState, ContainerStatus, ExecutorUnavailable
from gpudock.runtime import reconciler
from gpudock.runtime.context import RuntimeContext
from gpudock.server import build_server

pytestmark = pytest.mark.docker

WARNING = "belongs to no active job"


@pytest.fixture
def ctx(tmp_path: Path, docker_api: Any) -> Iterator[RuntimeContext]:
    """A server's runtime on the real engine (nothing started); its containers removed after."""
    server = build_server(tmp_path, ServerConfig(), emulate_gpus="1xH100-80GB")
    yield server.ctx
    server.ctx.shutdown()
    cleanup_containers(docker_api, f"gpudock.instance={server.ctx.instance_id}")


def stray(docker_api: Any, ctx: RuntimeContext, job_id: int, command: list[str]) -> Any:
    """A container of this instance for ``job_id``, which no job in the store claims."""
    return docker_api.containers.run(
        TEST_IMAGE,
        command,
        detach=True,
        init=True,
        name=f"gpudock-{ctx.instance_id}-{job_id}-a0",
        labels={
            "gpudock.job": str(job_id),
            "gpudock.attempt": "0",
            "gpudock.instance": ctx.instance_id,
        },
    )


def clean_up(ctx: RuntimeContext, listed: ContainerStatus, docker_api: Any) -> None:
    """Step 4 for one stray, as a pass that listed it as ``listed`` would; wait for it."""
    reconciler._handle_orphan(ctx, listed)
    wait_for(
        lambda: not docker_api.api.containers(all=True, filters={"id": listed.id}),
        60,
        "the stray container to be removed",
    )


def test_a_container_that_exited_after_the_listing_is_removed_without_a_warning(
    ctx: RuntimeContext, docker_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    container = stray(docker_api, ctx, 4242, ["true"])
    wait_for(lambda: docker_api.api.inspect_container(container.id)["State"]["Status"] == "exited")
    now = ctx.executor.inspect(container.id)
    assert now is not None and now.finished
    listed = replace(now, state=ContainerState.RUNNING)  # listed while it still ran
    with caplog.at_level(logging.WARNING, logger="gpudock.reconciler"):
        clean_up(ctx, listed, docker_api)
    assert WARNING not in caplog.text


def test_a_container_still_running_is_reported_and_stopped(
    ctx: RuntimeContext, docker_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    container = stray(docker_api, ctx, 4343, ["sleep", "300"])
    listed = ctx.executor.inspect(container.id)
    assert listed is not None and listed.state is ContainerState.RUNNING
    with caplog.at_level(logging.WARNING, logger="gpudock.reconciler"):
        clean_up(ctx, listed, docker_api)
    assert f"stopping container {listed.name}: it {WARNING} (job 4343)" in caplog.text


def test_a_container_being_removed_is_left_to_its_remover(
    ctx: RuntimeContext,
    docker_api: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finisher's removal under way: dockerd reports ``removing`` while it runs, too
    briefly to catch here, so inspect answers that state for the real exited container."""
    container = stray(docker_api, ctx, 4444, ["true"])
    wait_for(lambda: docker_api.api.inspect_container(container.id)["State"]["Status"] == "exited")
    now = ctx.executor.inspect(container.id)
    assert now is not None
    listed = replace(now, state=ContainerState.RUNNING)  # listed while it still ran
    monkeypatch.setattr(
        ctx.executor, "inspect", lambda _id: replace(now, state=ContainerState.REMOVING)
    )
    calls: list[str] = []
    monkeypatch.setattr(ctx.executor, "stop", lambda *_args: calls.append("stop"))
    monkeypatch.setattr(ctx.executor, "remove", lambda *_args: calls.append("remove"))
    with caplog.at_level(logging.WARNING, logger="gpudock.reconciler"):
        done = reconciler._handle_orphan(ctx, listed)
        assert done is not None
        done.result(timeout=60)
    assert WARNING not in caplog.text
    assert calls == []


def test_a_never_started_container_is_removed_without_a_stop_or_a_warning(
    ctx: RuntimeContext, docker_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What a requeue after an engine fault, or a crash between create and start, leaves."""
    created = docker_api.api.create_container(
        TEST_IMAGE,
        ["sleep", "300"],
        name=f"gpudock-{ctx.instance_id}-4545-a0",
        labels={"gpudock.job": "4545", "gpudock.attempt": "0", "gpudock.instance": ctx.instance_id},
    )
    listed = ctx.executor.inspect(created["Id"])
    assert listed is not None and listed.state is ContainerState.CREATED
    with caplog.at_level(logging.WARNING, logger="gpudock.reconciler"):
        clean_up(ctx, listed, docker_api)
    assert WARNING not in caplog.text


def test_an_orphan_the_engine_refuses_to_remove_is_left_for_the_next_pass(
    ctx: RuntimeContext, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = ContainerStatus("c0ffee", "gpudock-x-4646-a0", 4646, 0, ContainerState.DEAD)

    def refuse(_id: str) -> None:
        raise ExecutorUnavailable("Docker engine error while removing a container: driver busy")

    monkeypatch.setattr(ctx.executor, "remove", refuse)
    monkeypatch.setattr(ctx.executor, "logs", lambda *_a, **_k: iter(()))
    with caplog.at_level(logging.WARNING, logger="gpudock.reconciler"):
        done = reconciler._handle_orphan(ctx, listed)
        assert done is not None
        done.result(timeout=60)
    assert "orphan container gpudock-x-4646-a0 not removed yet: " in caplog.text
    assert "failed unexpectedly" not in caplog.text
