"""The agent's /metrics: its node's gpu_* families, exactly as the server writes them."""

from __future__ import annotations

from gpudock.agent.gpus import NodeGpus
from gpudock.agent.metrics import exposition
from gpudock.agent.protocol import AgentOrders, HeldGpuOut, ReportedGpu
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.metrics.gauges import GpuFacts, HeldGpu, gpu_families, render_gauges

GIB = 1024**3


def orders(held: list[HeldGpuOut]) -> AgentOrders:
    return AgentOrders(
        instance="i",
        node="sw1",
        interval=5,
        lease=50,
        nonce=None,
        kill=[],
        remove=[],
        assigned=[],
        held=held,
    )


def test_the_agent_writes_the_servers_gpu_families_for_its_node() -> None:
    gpus = NodeGpus(
        [
            ReportedGpu(
                uuid="GPU-1",
                index=0,
                name="NVIDIA H100",
                memory_total=80 * GIB,
                utilization=0.5,
                memory_used=10 * GIB,
                temperature=50.0,
                power=300.0,
            ),
            ReportedGpu(
                uuid="GPU-2", index=1, name="NVIDIA H100", memory_total=80 * GIB, healthy=False
            ),
        ]
    )
    held = [HeldGpuOut(uuid="GPU-1", job=4, user="ann", queue="q", shared=False)]
    page = exposition("sw1", gpus, orders(held)).decode()
    facts = [
        GpuFacts("GPU-1", "sw1", 0, "NVIDIA H100", 80 * GIB, False, "ok", 80 * GIB, True),
        GpuFacts("GPU-2", "sw1", 1, "NVIDIA H100", 80 * GIB, False, "unhealthy", 0, False),
    ]
    readings = {"GPU-1": GpuTelemetry(0.5, 10 * GIB, 50.0, 300.0), "GPU-2": GpuTelemetry()}
    server = render_gauges(gpu_families(facts, [HeldGpu("GPU-1", 4, "ann", "q", False)], readings))
    assert page == server.decode()
    assert (
        'gpudock_gpu_allocation_info{node="sw1",gpu="0",uuid="GPU-1",model="NVIDIA H100",'
        'job="4",user="ann",queue="q",kind="exclusive"} 1.0' in page
    )
    assert (
        'gpudock_gpu_healthy{node="sw1",gpu="1",uuid="GPU-2",model="NVIDIA H100",'
        'emulated="false"} 0.0' in page
    )


def test_without_nvml_the_agent_serves_empty_families() -> None:
    page = exposition("sw1", NodeGpus(None, note="no driver"), None).decode()
    assert "# TYPE gpudock_gpu_healthy gauge" in page and "gpudock_gpu_healthy{" not in page
