"""Child process for ``MonitorProcess``: a ``NodeGpuMonitor`` on the fake NVML.

It reads one JSON command per line on stdin and answers one JSON line on
stdout: ``{"calls": [...]}``, the sink calls made since the last answer (each
``{"call": name, ...fields}``). Commands: ``start``, ``watch`` (one watchdog
pass), ``poll`` (one health pass), ``wait`` (until ``n`` calls are pending or
``timeout`` seconds pass: for the event thread), ``assign`` (``assignments``
and ``containers`` replace the sink's), ``stop``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from typing import Any


class RecordingSink:
    """A ``NodeSink`` that answers from the test's data and records every call."""

    def __init__(self) -> None:
        self.assigned: list[Any] = []
        self.containers: dict[str, int] = {}
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, name: str, **fields: Any) -> None:
        with self.lock:
            self.calls.append({"call": name, **fields})

    def assignments(self) -> list[Any]:
        return list(self.assigned)

    def job_of_container(self, container_id: str) -> int | None:
        self.record("job_of_container", container=container_id)
        return self.containers.get(container_id)

    def over_limit(self, offence: Any) -> None:
        self.record("over_limit", **dataclasses.asdict(offence), reason=offence.reason)

    def stray(self, stray: Any, killed: bool) -> None:
        self.record("stray", **dataclasses.asdict(stray), killed=killed)

    def gpu_fault(self, fault: Any) -> None:
        fields = dataclasses.asdict(fault)
        self.record("gpu_fault", **{k: str(v) if k != "code" else v for k, v in fields.items()})

    def sharing(self, mode: Any, mps: Any) -> None:
        self.record("sharing", mode=str(mode), mps=None if mps is None else dataclasses.asdict(mps))

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            calls, self.calls = self.calls, []
        return calls


def main(argv: list[str]) -> None:
    from gpudock.gpus.config import GpuNodeConfig
    from gpudock.gpus.node_monitor import NodeGpuMonitor
    from gpudock.gpus.watchdog import Assignment

    setup = json.loads(argv[1])
    sink = RecordingSink()
    config = GpuNodeConfig.model_validate(setup.get("config", {}))
    monitor = NodeGpuMonitor(config, sink, setup["gpus"], setup.get("sharing", "auto"))
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "start":
            monitor.start(watch=False)  # the test steps the passes itself
        elif op == "watch":
            monitor.watch_once()
        elif op == "poll":
            monitor.poll_once()
        elif op == "assign":
            sink.assigned = [
                Assignment(a["job_id"], tuple(a["gpu_uuids"]), a.get("memory_limit"))
                for a in command["assignments"]
            ]
            sink.containers = command.get("containers", {})
        elif op == "wait":
            deadline = time.monotonic() + command.get("timeout", 10)
            while len(sink.calls) < command["n"] and time.monotonic() < deadline:
                time.sleep(0.01)
        elif op == "stop":
            monitor.stop()
        answer = {"calls": sink.take(), "watching": monitor.watching}
        print(json.dumps(answer), flush=True)
        if op == "stop":
            return


if __name__ == "__main__":
    main(sys.argv)
