"""The mount race of issue 38 against the real dockerd: containers never see past the flip.

A folder under an ``rw`` allowlist entry flips between itself and a symlink
to ``outside`` every 0-20 ms (``tests/kit/mount_race.py``) while containers
mounting it start, 4 at a time, 0-20 ms apart, until ``STARTED`` of them ran.
Each launch waits 0-20 ms between its check and its open, so launches meet
the flip mid-way. Every container reads the folder's ``marker`` (and in
``rw`` mode writes a file): each one printed the real folder's marker, or
its launch was refused with the reason. The many cheap tries are in
``test_mount_staging.py``; these are the end-to-end proof.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require
from tests.integration.executors.test_docker_executor import make_request, wait_exit
from tests.kit.mount_race import INSIDE, Flipper, RaceHost

from gpudock.config import ExecutorConfig
from gpudock.core.job import Mount
from gpudock.executors.base import LaunchError
from gpudock.executors.docker import DockerExecutor
from gpudock.executors.mount_staging import MountStager

pytestmark = pytest.mark.docker

STARTED = 12  # containers that ran, per mode
MAX_LAUNCHES = 120
CLEAR_REASONS = ("changed while it was being mounted", "cannot be resolved", "resolves to")


@pytest.fixture
def host(tmp_path: Path) -> RaceHost:
    return RaceHost.make(tmp_path / "host")


@pytest.fixture
def executor(tmp_path: Path, host: RaceHost, instance_id: str) -> Iterator[DockerExecutor]:
    import os

    if os.geteuid() != 0:
        require("root", "mount staging binds folders, which needs CAP_SYS_ADMIN")
    pause = random.Random(38)
    stager = MountStager(tmp_path / "staging", between=lambda: time.sleep(pause.uniform(0, 0.020)))
    config = ExecutorConfig.model_validate({"allowed_mounts": [f"{host.allowed}:rw"]})
    ex = DockerExecutor(config, instance_id, stager=stager)
    assert ex.mount_problem() is None
    yield ex
    ex.close()


def run_one(executor: DockerExecutor, docker_api: Any, host: RaceHost, read_only: bool) -> str:
    """The container's output, or ``refused: <reason>``."""
    write = "" if read_only else "; echo x > /m/written-$GPUDOCK_JOB_ID"
    request = make_request(
        ["sh", "-c", f"cat /m/marker{write}"],
        mounts=(Mount(host=str(host.flip), container="/m", read_only=read_only),),
    )
    try:
        status = executor.launch(request)
    except LaunchError as exc:
        return f"refused: {exc}"
    wait_exit(docker_api, status.id)
    output = b"".join(executor.logs(status.id)).decode()
    executor.remove(status.id)
    return output


@pytest.mark.parametrize("read_only", [True, False], ids=["ro", "rw"])
def test_containers_mount_the_real_folder_or_are_refused_while_it_flips(
    executor: DockerExecutor, docker_api: Any, host: RaceHost, read_only: bool
) -> None:
    outcomes: list[str] = []

    def worker(seed: int) -> None:
        spread = random.Random(seed)
        while (
            len(outcomes) < MAX_LAUNCHES
            and sum(not o.startswith("refused") for o in outcomes) < STARTED
        ):
            time.sleep(spread.uniform(0, 0.020))
            outcomes.append(run_one(executor, docker_api, host, read_only))

    with Flipper(host), ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4)))
    started = [o for o in outcomes if not o.startswith("refused: ")]
    refused = [o for o in outcomes if o.startswith("refused: ")]
    assert len(started) >= STARTED, outcomes  # containers did meet the real folder
    assert all(o == INSIDE for o in started), [o for o in started if o != INSIDE]
    assert any("changed while it was being mounted" in o for o in refused), refused
    assert all(any(reason in o for reason in CLEAR_REASONS) for o in refused), refused
    assert host.outside_untouched()
    if not read_only:
        assert len(list(host.flip.glob("written-*"))) == len(started)
    assert executor.release_stale_mounts() == 0  # every launch unstaged its own
