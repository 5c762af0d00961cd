"""The simulator and the live server make the same placements for the same job stream.

The live server (real dockerd, four emulated H100s) and ``gpudock.sim`` run
the same scheduler; fed the same jobs in the same order, every job must get
the same GPU indices, and the same jobs must wait.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, submit, wait_settled

from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import Simulator
from gpudock.sim.policies import POLICIES
from gpudock.sim.traces import TraceJob

pytestmark = pytest.mark.docker

GiB = 2**30
# (GPUs, share of each GPU in GiB or None for whole GPUs)
STREAM: list[tuple[int, int | None]] = [
    (1, None),
    (1, 20),
    (2, None),
    (1, 40),
    (1, 20),
    (1, None),  # no idle GPU is left: waits
    (1, 10),
]


def test_the_simulator_places_a_job_stream_like_the_live_server(make_server: Any) -> None:
    # The simulator's GPUs hold no memory reserve: the server's is set to none to match.
    config = {**FAST_CONFIG, "node": {**FAST_CONFIG["node"], "gpu_memory_reserve": 0}}
    server = make_server(emulate="4xH100-80GB", config=config).start()
    api = server.api()
    index = {g["uuid"]: g["index"] for g in api.get("/v1/gpus").json()}
    live: list[tuple[int, ...] | None] = []
    for gpus, share in STREAM:
        spec: dict[str, Any] = {"image": TEST_IMAGE, "command": ["sleep", "600"], "gpus": gpus}
        if share is not None:
            spec["gpu_memory"] = f"{share}GiB"
        job = submit(api, **spec)
        state = wait_settled(api, job)
        if state["state"] == "RUNNING":
            live.append(tuple(sorted(index[u] for u in state["gpus"])))
        else:
            live.append(None)

    jobs = [
        TraceJob(
            job_id=str(i),
            submit_time=float(i),
            duration=1e9,
            num_gpus=gpus,
            gpu_fraction=None if share is None else share / 80,
        )
        for i, (gpus, share) in enumerate(STREAM)
    ]
    sim = Simulator(jobs, parse_cluster("1x4:H100-80GB:80GiB"), POLICIES["priority"])
    run = sim.run()
    placed = sim.first_placements()
    started = {r.job_id for r in run.jobs if r.start is not None and r.start < len(STREAM)}
    simulated = [placed[str(i)] if str(i) in started else None for i in range(len(STREAM))]
    assert simulated == live
