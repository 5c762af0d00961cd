"""``/metrics`` reports the store as it is: allocations, GPUs, queues, jobs and nodes."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from tests.kit.cluster import fill

from gpudock.api.app import create_app
from gpudock.config import MetricsConfig, ServerConfig
from gpudock.gcpause import collector_paused
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.metrics.collector import Gauge, StoreCollector, exposition, render_gauges
from gpudock.runtime.context import RuntimeContext
from gpudock.store.db import Database
from gpudock.store.snapshot import load_snapshot

Samples = dict[str, list[tuple[dict[str, str], float]]]


@pytest.fixture
def ctx(db_url: str, tmp_path: Path) -> Iterator[RuntimeContext]:
    db = Database.open(db_url)
    fill(db, nodes=2, gpus_per_node=4, jobs=16)  # per node: 2 exclusive jobs, 4 shares
    context = RuntimeContext(
        db=db,
        executor=None,  # type: ignore[arg-type]  # a scrape never touches the executor
        config=ServerConfig(),
        node_name="node-000",
        instance_id="test",
        log_dir=tmp_path,
    )
    yield context
    db.close()


def scrape(ctx: RuntimeContext, collector: StoreCollector | None = None) -> Samples:
    text = exposition(ctx.metrics, collector or StoreCollector(ctx)).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def test_every_held_gpu_has_one_allocation_info_series_per_job(ctx: RuntimeContext) -> None:
    info = scrape(ctx)["gpudock_gpu_allocation_info"]
    assert len(info) == 12  # per node: 2 exclusive jobs + 2 GPUs with two shares each
    kinds = sorted(labels["kind"] for labels, _ in info)
    assert kinds == ["exclusive"] * 4 + ["shared"] * 8
    first = next(labels for labels, _ in info if labels["job"] == "1")
    assert first == {
        "node": "node-000",
        "gpu": "0",
        "uuid": first["uuid"],
        "model": "NVIDIA H100-80GB",
        "job": "1",
        "user": "user0",
        "queue": "vision",
        "kind": "exclusive",
    }
    assert first["uuid"].startswith("GPU-")
    assert all(value == 1 for _, value in info)


def test_emulated_gpus_say_so_and_report_the_stores_view(ctx: RuntimeContext) -> None:
    samples = scrape(ctx)
    memory = {
        labels["gpu"] + "@" + labels["node"]: v
        for labels, v in samples["gpudock_gpu_memory_used_bytes"]
    }
    utilization = samples["gpudock_gpu_utilization_ratio"]
    assert len(utilization) == 8
    assert {labels["emulated"] for labels, _ in utilization} == {"true"}
    assert memory["0@node-000"] == 80 * 1024**3  # exclusive: the whole GPU
    assert memory["2@node-000"] == 20 * 1024**3  # two 10 GiB shares
    shared = next(v for labels, v in utilization if labels["gpu"] == "2")
    assert shared == pytest.approx(0.25)
    assert "gpudock_gpu_temperature_celsius" not in samples  # no reading to report


def test_real_gpus_report_nvml_readings(ctx: RuntimeContext) -> None:
    with ctx.db.write() as session:
        from gpudock.store.models import GpuRow

        row = session.query(GpuRow).filter_by(node="node-000", index=1).one()
        row.emulated, uuid = False, row.uuid
    reading = GpuTelemetry(utilization=0.42, memory_used=7, temperature=61.0, power=250.5)
    samples = scrape(ctx, StoreCollector(ctx, telemetry=lambda: {uuid: reading}))
    real = {
        name: [(labels, v) for labels, v in samples[name] if labels["emulated"] == "false"]
        for name in ("gpudock_gpu_utilization_ratio", "gpudock_gpu_temperature_celsius")
    }
    assert [v for _, v in real["gpudock_gpu_utilization_ratio"]] == [0.42]
    assert [v for _, v in real["gpudock_gpu_temperature_celsius"]] == [61.0]
    assert samples["gpudock_gpu_power_watts"][0][1] == 250.5


def test_jobs_queues_and_nodes_are_counted(ctx: RuntimeContext) -> None:
    samples = scrape(ctx)
    jobs = {(labels["state"], labels["queue"]): v for labels, v in samples["gpudock_jobs"]}
    assert jobs == {
        ("RUNNING", "vision"): 6,
        ("RUNNING", "nlp"): 6,
        ("PENDING", "vision"): 1,
        ("PENDING", "nlp"): 1,
        ("CANCELLED", "vision"): 1,
        ("CANCELLED", "nlp"): 1,
    }
    pending = {(lab["queue"], lab["reason"]): v for lab, v in samples["gpudock_queue_pending_jobs"]}
    assert pending == {("vision", "devices"): 1, ("nlp", "quota"): 1}
    in_use = {labels["queue"]: v for labels, v in samples["gpudock_queue_gpus_in_use"]}
    # a share counts against what shares may take: 10 of 80 GiB less the 512 MiB reserve
    assert in_use["vision"] + in_use["nlp"] == pytest.approx(4 + 8 * 10 / 79.5)
    assert {labels["node"]: v for labels, v in samples["gpudock_node_ready"]} == {
        "node-000": 1,
        "node-001": 1,
    }


def test_runtime_counters_and_histograms_have_bounded_labels(ctx: RuntimeContext) -> None:
    ctx.metrics.job_started("vision", submitted_at=100.0, started_at=130.0)
    ctx.metrics.attempt_ended("vision", 130.0, 190.0, "preempt", retried=False)
    ctx.metrics.attempt_ended("nlp", 130.0, 150.0, "max_runtime", retried=False)
    ctx.metrics.attempt_ended("nlp", None, 150.0, None, retried=True)
    samples = scrape(ctx)
    assert samples["gpudock_job_wait_seconds_sum"] == [({"queue": "vision"}, 30.0)]
    assert samples["gpudock_job_preemptions_total"] == [({"queue": "vision"}, 1.0)]
    assert samples["gpudock_job_watchdog_kills_total"] == [
        ({"queue": "nlp", "reason": "max_runtime"}, 1.0)
    ]
    assert samples["gpudock_job_retries_total"] == [({"queue": "nlp"}, 1.0)]
    run_counts = {lab["queue"]: v for lab, v in samples["gpudock_job_run_seconds_count"]}
    assert run_counts == {"vision": 1, "nlp": 1}  # an attempt that never ran is not timed
    for name, series in samples.items():
        if name.endswith("_bucket"):
            assert all("job" not in labels for labels, _ in series), name


def test_label_values_and_help_are_escaped() -> None:
    family = Gauge("x_info", 'say "hi"\\', ["user", "queue"])
    family.add(family.labels('a"b\\c\nd', "q"), 1)
    (parsed,) = text_string_to_metric_families(render_gauges([family]).decode())
    assert parsed.documentation == 'say "hi"\\'
    assert parsed.samples[0].labels == {"user": 'a"b\\c\nd', "queue": "q"}


def test_metrics_is_open_by_default_and_needs_the_token_when_one_is_set(
    ctx: RuntimeContext,
) -> None:
    client = TestClient(create_app(ctx))
    open_response = client.get("/metrics")
    assert open_response.status_code == 200
    assert open_response.headers["content-type"].startswith("text/plain; version=0.0.4")
    ctx.config = ServerConfig(metrics=MetricsConfig(token="s3cret-scrape-token"))
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert "metrics.token" in wrong.json()["error"]["message"]
    right = client.get("/metrics", headers={"Authorization": "Bearer s3cret-scrape-token"})
    assert right.status_code == 200 and b"gpudock_gpu_allocation_info" in right.content


def test_a_short_metrics_token_is_refused_at_load() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="at least 16"):
        MetricsConfig(token="short")


def test_a_scrape_pauses_the_collector_and_leaves_no_cyclic_garbage(ctx: RuntimeContext) -> None:
    """What a server's scrape drops is freed by reference counting: pausing the GC is safe."""
    with ctx.db.read() as session:
        ctx.snapshot = load_snapshot(session, ctx.clock())  # as the controller publishes it
    paused: list[bool] = []
    collector = StoreCollector(ctx)
    real = collector.collect

    def watched() -> Iterator[Gauge]:
        paused.append(not gc.isenabled())
        yield from real()

    collector.collect = watched  # type: ignore[method-assign]
    exposition(ctx.metrics, collector)  # imports and caches settle first
    with collector_paused():
        gc.collect()
        exposition(ctx.metrics, collector)
        assert gc.collect() == 0, "a scrape created reference cycles: its garbage waits"
    assert paused == [True, True]
    assert gc.isenabled()
