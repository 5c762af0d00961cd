"""A real Prometheus scrapes a real server: series, labels, alert rules and the dashboard.

One module-wide stack (keeps CI cheap): a ``gpudock server`` with four
emulated H100s on the real dockerd, running an exclusive job and a shared
one, with a third job pending for lack of GPUs; and Debian's ``prometheus``
scraping it every second with ``deploy/prometheus/alerts.yml`` loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.prometheus import ALERTS_DIR, DASHBOARD, PrometheusProcess
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
QUEUES = {
    "queues": [
        {"name": "vision", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}},
        {"name": "nlp", "guarantee": {"gpus": 1}},
    ]
}
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$node": ".*", "$queue": ".*"}


@dataclass
class Stack:
    server: ServerProcess
    prometheus: PrometheusProcess
    exclusive: dict[str, Any]
    shared: dict[str, Any]
    pending: dict[str, Any]


@pytest.fixture(scope="module")
def stack(docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("metrics")
    config = {**FAST_CONFIG, "scheduler": {"queues": QUEUES}}
    server = ServerProcess(home / "server", config=config).start(wait=False)
    prometheus = None
    try:
        server.wait_healthy(timeout=90)  # a loaded CI machine can be slow to import
        api = server.api()
        sleep = {"image": TEST_IMAGE, "command": ["sleep", "600"]}
        first = submit(api, **sleep, gpus=1, queue="vision")
        second = submit(api, **sleep, gpus=1, gpu_memory="10GiB", queue="nlp")
        exclusive, shared = (wait_state(api, j, {"RUNNING"}) for j in (first, second))
        third = submit(api, **sleep, gpus=3, queue="vision")  # 4 could never be admitted
        wait_for(lambda: job_state(api, third)["pending_reasons"], 30, "a pending reason")
        rules = (ALERTS_DIR / "alerts.yml",)
        prometheus = PrometheusProcess(home / "prometheus", [f"127.0.0.1:{server.port}"], rules)
        prometheus.start().wait_scrapes(2)
        yield Stack(server, prometheus, exclusive, shared, job_state(api, third))
    finally:
        if prometheus is not None:
            prometheus.stop()
        teardown(server, docker)


def series(stack: Stack, expr: str) -> list[dict[str, str]]:
    return [item["metric"] for item in stack.prometheus.query(expr)]


def test_the_target_is_up_and_scraped_without_errors(stack: Stack) -> None:
    (target,) = stack.prometheus.api("targets")["activeTargets"]
    assert target["health"] == "up", target["lastError"]
    assert target["lastError"] == ""


def test_allocation_info_names_each_running_job_and_its_gpu(stack: Stack) -> None:
    held = series(stack, "gpudock_gpu_allocation_info == 1")
    by_job = {labels["job"]: labels for labels in held}
    assert set(by_job) == {str(stack.exclusive["id"]), str(stack.shared["id"])}
    exclusive = by_job[str(stack.exclusive["id"])]
    assert exclusive["uuid"] == stack.exclusive["gpus"][0]
    assert (exclusive["queue"], exclusive["user"], exclusive["kind"]) == (
        "vision",
        "admin",
        "exclusive",
    )
    assert exclusive["model"] == "NVIDIA H100-80GB"
    assert re.fullmatch(r"\d", exclusive["gpu"])
    assert by_job[str(stack.shared["id"])]["kind"] == "shared"


def test_every_gpu_reports_telemetry_marked_emulated(stack: Stack) -> None:
    for name in ("utilization_ratio", "memory_used_bytes", "memory_total_bytes", "healthy"):
        found = series(stack, f"gpudock_gpu_{name}")
        assert len(found) == 4, name
        assert {labels["emulated"] for labels in found} == {"true"}, name
    busy = stack.prometheus.query(
        f'gpudock_gpu_utilization_ratio{{uuid="{stack.exclusive["gpus"][0]}"}}'
    )
    assert float(busy[0]["value"][1]) == 1.0


def test_queues_jobs_nodes_and_scheduler_series_exist(stack: Stack) -> None:
    pending = series(stack, 'gpudock_queue_pending_jobs{queue="vision"} == 1')
    assert [labels["reason"] for labels in pending] == [
        stack.pending["pending_reasons"][0]["layer"]
    ]
    assert series(stack, 'gpudock_queue_guarantee_gpus{queue="vision"} == 2')
    assert series(stack, 'gpudock_queue_limit_gpus{queue="vision"} == 4')
    assert series(stack, 'gpudock_queue_limit_gpus{queue="nlp"}') == []  # no limit: no series
    assert series(stack, 'gpudock_jobs{state="RUNNING",queue="vision"} == 1')
    assert series(stack, 'gpudock_job_wait_seconds_count{queue="nlp"} == 1')
    assert series(stack, "gpudock_scheduler_cycle_seconds_count > 0")
    assert series(stack, 'gpudock_scheduler_decisions_total{outcome="wait"} > 0')
    assert series(stack, "gpudock_scheduler_placements_total >= 2")
    (node,) = series(stack, "gpudock_node_ready == 1")
    assert series(stack, f'gpudock_node_cordoned{{node="{node["node"]}"}} == 0')


def test_the_alert_rules_load_and_evaluate_against_the_real_series(stack: Stack) -> None:
    groups = stack.prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == 9
    assert {rule["health"] for rule in rules} == {"ok"}, [r.get("lastError") for r in rules]
    firing = {a["labels"]["alertname"] for a in stack.prometheus.api("alerts")["alerts"]}
    assert "GpusIdleWhileJobsPending" in firing  # pending, not yet for 10m
    assert not firing & {"NodeNotReady", "GpuUnhealthy", "GpuMemoryCritical"}


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(Path(DASHBOARD).read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((f"{panel['title']} / {target['refId']}", expr))
    return queries


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    titles = {panel["title"] for panel in json.loads(Path(DASHBOARD).read_text())["panels"]}
    for wanted in (
        "Cluster allocation and utilisation",
        "Per-GPU utilisation",
        "Queue GPUs against quota and fair share",
        "Pending jobs by reason",
        "Job wait time (submit to running)",
        "Scheduling cycle latency",
    ):
        assert wanted in titles
    assert len(dashboard_queries()) >= 20


@pytest.mark.parametrize(("panel", "expr"), dashboard_queries(), ids=lambda v: str(v)[:60])
def test_every_dashboard_query_parses_and_returns_a_series(
    stack: Stack, panel: str, expr: str
) -> None:
    assert "$" not in expr, f"{panel}: a Grafana variable is left unsubstituted"
    result = stack.prometheus.query(expr)
    assert result, f"{panel}: {expr} returned no series"
