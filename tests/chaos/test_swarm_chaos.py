"""Chaos on the Swarm backend: random faults while jobs flow, then the books must balance.

For ``--duration`` seconds (CI: 120; ``--seed`` picks the run) jobs of every
shape are submitted (one GPU, two GPUs, CPU only, two-node gangs, with
retries) while faults strike: on a worker, an agent killed (and restarted),
a dockerd killed (and restarted), a link cut (and healed); or the server
killed with SIGKILL (and restarted on the same database). The manager's
dockerd is left alone (it is the swarm's only manager), and a leader taking
over belongs to the HA control plane, which gpudock lacks. Then everything
heals, every job ends, and:

* every job in the store is accounted for (those whose submit answered, and
  any whose answer a killed server never sent): it ended, and an ending other
  than success says why (no job lost without a recorded reason);
* no job ran twice at once, and no GPU was in two running containers at
  once: from the containers' own start and exit, as the nodes' stand-in
  NVIDIA runtime saw them (``tests/kit/swarm.py``);
* nothing leaks: no GPU stays allocated, no service of the instance stays.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from tests.kit.server import TERMINAL, wait_for
from tests.kit.swarm_server import SwarmServer

log = logging.getLogger("chaos")
IMAGE = "gpudock-test/busybox:latest"
WORKERS = ("sw2", "sw3")  # sw1, the only manager, hosts the server: its dockerd stays up
MAX_WAITING = 6  # jobs not yet running, at most, while submitting


@dataclass
class Books:
    submitted: list[int] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a thread's failure: the run is void


def _guarded(books: Books, body: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            body()
        except Exception as exc:  # reported by the test, not lost in a thread
            books.errors.append(f"{type(exc).__name__}: {exc}")

    return run


def _job(rng: random.Random) -> dict[str, Any]:
    seconds = rng.choice(("0.5", "1", "2", "3", "5"))
    spec: dict[str, Any] = {"image": IMAGE, "command": ["sleep", seconds], "retries": 3}
    shape = rng.random()
    if shape < 0.55:
        spec["gpus"] = 1
    elif shape < 0.7:
        spec["gpus"] = 2
    elif shape < 0.85:
        spec["gpus"] = 0
    else:
        spec.update(gpus=1, nodes=2, command=["sh", "-c", f"echo rank $RANK; sleep {seconds}"])
    if rng.random() < 0.1:
        spec["command"] = ["sh", "-c", "exit 3"]  # a failing job spends its retries
    return spec


def _submitter(api: httpx.Client, rng: random.Random, stop: threading.Event, books: Books) -> None:
    while not stop.is_set():
        with contextlib.suppress(httpx.TransportError):  # a killed server: wait for it
            _submit_one(api, rng, books)
        stop.wait(rng.uniform(0.1, 0.6))


def _submit_one(api: httpx.Client, rng: random.Random, books: Books) -> None:
    waiting = api.get("/v1/jobs", params={"state": ["PENDING", "ALLOCATED", "STARTING"]})
    if waiting.status_code == 200 and len(waiting.json()) < MAX_WAITING:
        response = api.post("/v1/jobs", json=_job(rng))
        if response.status_code == 201:
            books.submitted.append(int(response.json()["id"]))
        else:
            books.refused.append(response.text)


def _faults(cs: SwarmServer, rng: random.Random, stop: threading.Event, books: Books) -> None:
    """One fault at a time, on one worker or the server: strike, hold a while, undo,
    let the node recover."""
    while not stop.wait(rng.uniform(2.0, 6.0)):
        node = cs.swarm.node(rng.choice(WORKERS))
        kind = rng.choice(("agent", "dockerd", "link", "server"))
        hold = rng.uniform(1.0, 9.0)
        where = "server" if kind == "server" else node.node_name
        books.faults.append(f"{kind}@{where} for {hold:.1f}s")
        log.warning("chaos: %s", books.faults[-1])
        if kind == "server":
            cs.server.kill9()
            stop.wait(hold)
            cs.server.start()
        elif kind == "agent":
            cs.agents[node.node_name].kill9()
            stop.wait(hold)
            cs.start_agent(node.node_name)
        elif kind == "dockerd":
            node.kill9()
            stop.wait(hold)
            node.start()
        else:
            node.cut()
            stop.wait(hold)
            node.heal()
        with contextlib.suppress(AssertionError):  # recovers at its own pace; go on anyway
            wait_for(lambda n=node.node_name: cs.swarm.states().get(n) == "ready", 30, "ready")


def _overlaps(spans: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    spans = sorted(spans)
    return [
        (a[2], b[2]) for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1] - 0.001
    ]


def test_random_faults_while_jobs_flow_leave_the_books_balanced(
    swarm_cluster: SwarmServer, chaos_seed: int, chaos_duration: float
) -> None:
    cs, rng, books = swarm_cluster, random.Random(chaos_seed), Books()
    cs.heal()
    api = cs.api
    before = [int(j["id"]) for j in api.get("/v1/jobs", params={"limit": 1}).json()]
    first = before[0] + 1 if before else 1  # jobs of earlier tests are theirs
    stop = threading.Event()
    submitter = _guarded(books, lambda: _submitter(cs.server.api(), rng, stop, books))
    faults = _guarded(books, lambda: _faults(cs, random.Random(chaos_seed + 1), stop, books))
    threads = [threading.Thread(target=submitter), threading.Thread(target=faults)]
    for thread in threads:
        thread.start()
    try:
        stop.wait(chaos_duration)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        cs.heal(timeout=120)
    listed = api.get("/v1/jobs", params={"limit": 10000}).json()
    stored = {int(j["id"]) for j in listed if int(j["id"]) >= first}
    assert set(books.submitted) <= stored, set(books.submitted) - stored
    ids = sorted(stored)  # with any whose 201 a killed server never sent
    wait_for(lambda: _all_ended(api, ids), 180, "every submitted job to end")
    jobs = [api.get(f"/v1/jobs/{i}").json() for i in ids]
    summary = f"seed {chaos_seed}: {len(jobs)} jobs, faults {books.faults}"
    assert not books.errors, books.errors
    assert len(jobs) >= 10 and books.faults, summary
    assert not books.refused, books.refused
    for job in jobs:  # accounted for: ended, and any ending but success says why
        assert job["state"] in TERMINAL, (job["id"], job["state"])
        if job["state"] != "SUCCEEDED":
            assert job["reason"], (job["id"], job["state"], summary)
        for event in job["events"][1:]:
            assert event["reason"] or event["to"] in ("ALLOCATED", "STARTING", "RUNNING"), event
    checked = _no_double_runs(cs, set(ids), summary)
    wait_for(lambda: _nothing_held(cs), 60, "every GPU free and every service removed")
    states: dict[str, int] = defaultdict(int)
    for job in jobs:
        states[job["state"]] += 1
    kinds: dict[str, int] = defaultdict(int)
    for fault in books.faults:
        kinds[fault.split("@")[0]] += 1
    print(  # -s shows it: the run's figures
        f"chaos seed {chaos_seed}, {chaos_duration:g}s: {len(jobs)} jobs {dict(states)}, "
        f"{sum(j['attempt'] for j in jobs)} requeues, faults {dict(kinds)}, {checked} "
        "containers checked: 0 jobs twice, 0 GPUs twice, 0 lost without a reason"
    )


def _all_ended(api: httpx.Client, ids: list[int]) -> bool:
    return all(api.get(f"/v1/jobs/{i}").json()["state"] in TERMINAL for i in ids)


def _no_double_runs(cs: SwarmServer, ids: set[int], summary: str) -> int:
    """From the containers' start and exit: no job twice, no GPU twice, at any moment.
    Returns how many containers were checked."""
    lives = cs.swarm.lives()
    by_job: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    by_gpu: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for record in cs.swarm.runtime_log():
        if record["op"] != "create" or record.get("job") is None or int(record["job"]) not in ids:
            continue
        life = lives.get(record["container_id"])
        if life is None:
            continue  # created, never started
        span = (
            *life,
            f"job {record['job']} a{record['attempt']} r{record['rank']} "
            f"{record['node']} {record['container_id'][:12]}",
        )
        by_job[(record["job"], record.get("rank") or "0")].append(span)
        for gpu in record["devices"]:
            by_gpu[gpu].append(span)
    twice = {key: bad for key, spans in by_job.items() if (bad := _overlaps(spans))}
    assert not twice, f"jobs running twice at once: {twice} ({summary})"
    shared = {gpu: bad for gpu, spans in by_gpu.items() if (bad := _overlaps(spans))}
    assert not shared, f"GPUs in two running containers at once: {shared} ({summary})"
    return sum(len(spans) for spans in by_job.values())


def _nothing_held(cs: SwarmServer) -> bool:
    gpus = cs.api.get("/v1/gpus").json()
    with contextlib.closing(cs.swarm.client()) as client:
        services = client.api.services(filters={"label": f"gpudock.instance={cs.instance}"})
    return all(g["exclusive_job"] is None and g["shared_jobs"] == 0 for g in gpus) and not services
