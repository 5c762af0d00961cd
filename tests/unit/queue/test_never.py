"""``never_admitted``: admission's own rules in the best case there is (every queue idle).

A job refused even then can never run in its queue, so the submit refuses it; a
job the idle cluster would admit is never refused, however busy the cluster is.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.queue.builders import GiB, cpus, gpus

from gpudock.queue import QueuesConfig, QueueSet, QuotaLedger, Resources, never_admitted

CAPACITY = gpus(8, 8 * 80 * GiB, 16)  # 8 GPUs of 80GiB, 16 cores


def queues(*declared: dict[str, Any], cohorts: tuple[str, ...] = ()) -> QueuesConfig:
    return QueuesConfig.model_validate({"cohorts": list(cohorts), "queues": list(declared)})


def refusal(config: QueuesConfig, queue: str, request: Resources, user: str = "alice") -> str:
    found = never_admitted(config, queue, user, request, CAPACITY)
    assert found is not None
    return f"{found.field}: {found.message}"


def test_without_declared_queues_a_queue_is_a_label_and_nothing_is_refused() -> None:
    assert never_admitted(QueuesConfig(), "anything", "alice", gpus(64), CAPACITY) is None


def test_an_unknown_queue_names_the_declared_ones_default_included() -> None:
    config = queues({"name": "vision"}, {"name": "nlp"})

    assert refusal(config, "visoin", gpus(1)) == (
        "queue: queue 'visoin' does not exist (declared queues: default, nlp, vision)"
    )
    assert never_admitted(config, "default", "alice", gpus(1), CAPACITY) is None


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (gpus(7), "gpus: needs 7 GPUs but queue vision's limit is 6 GPUs"),
        (gpus(1, 200 * GiB), "gpu_memory: needs 200GiB GPU memory but queue vision's limit "
                             "is 160GiB GPU memory"),
        (cpus(5), "cpus: needs 5 CPUs but queue vision's limit is 4 CPUs"),
    ],
)  # fmt: skip
def test_a_request_above_the_queues_limit_names_the_resource_and_the_limit(
    request_: Resources, message: str
) -> None:
    config = queues({"name": "vision", "limit": {"gpus": 6, "gpu_memory": "160GiB", "cpus": 4}})

    assert refusal(config, "vision", request_) == message
    assert never_admitted(config, "vision", "alice", gpus(6, 160 * GiB, 4), CAPACITY) is None


def test_a_queue_that_may_not_borrow_holds_at_most_its_guarantee() -> None:
    config = queues({"name": "nlp", "guarantee": {"gpus": 2}, "borrow": False})

    assert refusal(config, "nlp", gpus(3)) == (
        "gpus: needs 3 GPUs but queue nlp may not borrow and its guarantee is 2 GPUs"
    )
    assert never_admitted(config, "nlp", "alice", gpus(2), CAPACITY) is None


def test_borrowing_is_bounded_by_what_the_cohort_and_the_cluster_can_ever_lend() -> None:
    # 8 GPUs: vision is guaranteed 2, a lender of another cohort 5 (never lent across
    # cohorts), so vision can have 2 + 1 unguaranteed = 3 at most
    config = queues(
        {"name": "vision", "cohort": "a", "guarantee": {"gpus": 2}},
        {"name": "other", "cohort": "b", "guarantee": {"gpus": 5}},
        cohorts=("a", "b"),
    )

    assert refusal(config, "vision", gpus(4)) == (
        "gpus: needs 4 GPUs but queue vision can have at most 3 GPUs: its guarantee of "
        "2 GPUs and 1 GPU cohort a and the cluster can lend"
    )
    assert never_admitted(config, "vision", "alice", gpus(3), CAPACITY) is None


def test_the_idle_verdict_is_the_ledgers_own() -> None:
    """Whatever the request, never_admitted refuses exactly what an idle ledger refuses."""
    config = queues(
        {"name": "vision", "cohort": "a", "guarantee": {"gpus": 2}, "limit": {"gpus": 5}},
        {"name": "nlp", "cohort": "a", "guarantee": {"gpus": 3}, "lend": False},
        {"name": "solo", "guarantee": {"gpus": 1}, "borrow": False},
        cohorts=("a",),
    )
    ledger = QuotaLedger(QueueSet.from_config(config), CAPACITY)
    for queue in ("vision", "nlp", "solo"):
        for n in range(10):
            idle = ledger.check(queue, gpus(n)).admitted
            assert (never_admitted(config, queue, "u", gpus(n), CAPACITY) is None) == idle


def test_a_per_user_cap_refuses_a_job_bigger_than_it_and_only_for_gpus() -> None:
    config = queues({"name": "capped", "max_running_gpus_per_user": 2})

    assert refusal(config, "capped", gpus(3)) == (
        "gpus: needs 3 GPUs but queue capped's max_running_gpus_per_user is 2"
    )
    assert never_admitted(config, "capped", "alice", gpus(2, 0, 16), CAPACITY) is None
