"""The agent's ``/metrics``: its node's ``gpu_*`` gauges, the server's families and labels.

Built with the server's own ``gpu_families`` from the agent's last NVML
read (health, memory, readings) and the server's last orders (which jobs
hold which GPU), so one Prometheus scrape config covers every node. A
small standard-library HTTP server in a daemon thread; anything but
``GET /metrics`` is 404.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpudock.agent.gpus import NodeGpus
from gpudock.agent.protocol import AgentOrders
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.metrics.gauges import CONTENT_TYPE, GpuFacts, HeldGpu, gpu_families, render_gauges


def exposition(node: str, gpus: NodeGpus | None, orders: AgentOrders | None) -> bytes:
    """The node's gauges in Prometheus' text format."""
    reported = (gpus.gpus if gpus is not None else None) or []
    held = orders.held if orders is not None else []
    used: dict[str, int] = {}
    exclusive = set()
    for one in held:
        if one.shared:
            used[one.uuid] = used.get(one.uuid, 0) + (one.memory or 0)
        else:
            exclusive.add(one.uuid)
    facts = [
        GpuFacts(
            uuid=g.uuid,
            node=node,
            index=g.index,
            name=g.name,
            memory_total=g.memory_total,
            emulated=False,
            health="ok" if g.healthy else "unhealthy",
            used_memory=g.memory_total if g.uuid in exclusive else used.get(g.uuid, 0),
            exclusive=g.uuid in exclusive,
        )
        for g in reported
    ]
    readings = {
        g.uuid: GpuTelemetry(g.utilization, g.memory_used, g.temperature, g.power) for g in reported
    }
    holds = [HeldGpu(h.uuid, h.job, h.user, h.queue, h.shared) for h in held]
    return render_gauges(gpu_families(facts, holds, readings))


def serve(port: int, host: str, page: Callable[[], bytes]) -> ThreadingHTTPServer:
    """Serve ``page()`` at ``GET /metrics`` on ``host:port`` in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = page()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes are not worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="gpudock-agent-metrics", daemon=True).start()
    return server
