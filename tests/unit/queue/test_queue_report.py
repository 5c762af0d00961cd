"""The queue report served by ``GET /v1/queues`` and ``gpudock queues``."""

from __future__ import annotations

from tests.unit.queue.builders import GiB, gpus, make_queue, queue_set

from gpudock.queue import FairShareConfig, QueueLoad, UsageHistory, build_report


def test_a_report_row_per_queue_with_borrowed_lendable_and_fair_share() -> None:
    queues = queue_set(
        make_queue("vision").cohort("research").guarantee(gpus=8).limit(gpus=12).weight(2),
        make_queue("nlp").cohort("research").guarantee(gpus=8),
        cohorts=["research"],
    )
    loads = {
        "vision": QueueLoad(gpus(10, "800GiB"), running_jobs=5, pending_jobs=2,
                            pending_demand=gpus(4, "320GiB")),
        "nlp": QueueLoad(gpus(2, "160GiB"), running_jobs=1),
    }  # fmt: skip
    report = build_report(queues, FairShareConfig(), gpus(16, "1280GiB"), loads)
    assert [q.name for q in report.queues] == ["default", "nlp", "vision"]
    vision = report.queues[2]
    assert vision.borrowed == gpus(2) and vision.lendable == gpus(0)
    assert report.queues[1].lendable == gpus(6)
    # demand: vision 14 (limit 12), nlp 2 -> vision 12, nlp 2 (capacity 16)
    assert vision.fair_share.gpus == 12 and report.queues[1].fair_share.gpus == 2
    assert vision.dominant_share == 10 / 16 / 2
    assert report.unguaranteed == gpus(0, "1280GiB")
    row = vision.to_dict()
    assert row["usage"] == {"gpus": 10.0, "gpu_memory": 800 * GiB, "cpus": 0.0}
    assert row["limit"] == {"gpus": 12.0, "gpu_memory": None, "cpus": None}
    assert row["running_jobs"] == 5 and row["pending_jobs"] == 2
    assert row["cohort"] == "research" and row["weight"] == 2.0


def test_undeclared_queues_with_jobs_are_listed_and_history_counts() -> None:
    history = UsageHistory(3600.0, 0.0, {"stray": (4.0, 0.0, 0.0)})
    report = build_report(
        queue_set(), FairShareConfig(), gpus(8), {"stray": QueueLoad(gpus(2))}, history
    )
    stray = report.queues[-1]
    assert stray.name == "stray" and not stray.declared
    assert stray.dominant_share == 0.25 and stray.effective_share == 0.75
    assert stray.borrowed == gpus(0)  # nothing is governed without quotas


def test_warnings_are_part_of_the_report() -> None:
    queues = queue_set(make_queue("a").guarantee(gpus=16))
    report = build_report(queues, FairShareConfig(), gpus(8), {})
    assert report.to_dict()["warnings"] == [
        "queues guarantee 16 GPUs in total but the cluster has 8 GPUs (a 16 GPUs): "
        "not every guarantee can be honoured at once"
    ]
