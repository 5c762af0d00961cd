"""Child process for ``run_discovery_subprocess``: discover, then print JSON.

Usage: ``python _child.py '{"node": ..., "emulate": ..., "process_uuids": [...]}'``.
Runs with the caller's ``LD_LIBRARY_PATH`` so pynvml loads whichever
``libnvidia-ml.so.1`` the test chose, or none.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import Any


class _Keep(logging.Handler):
    """Collects log records as plain dicts."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(
            {"logger": record.name, "level": record.levelname, "message": record.getMessage()}
        )


def main(argv: list[str]) -> None:
    from gpudock.core.errors import GpudockError
    from gpudock.gpus import discover, gpu_processes

    request = json.loads(argv[1])
    keep = _Keep()
    root = logging.getLogger()
    root.addHandler(keep)
    root.setLevel(logging.DEBUG)
    inventory = discover(request["node"], request["emulate"])
    logs = list(keep.records)
    processes: dict[str, Any] = {}
    for uuid in request["process_uuids"]:
        try:
            processes[uuid] = [list(p) for p in gpu_processes(uuid)]
        except GpudockError as err:
            processes[uuid] = {"error": type(err).__name__, "message": str(err)}
    report = {"inventory": dataclasses.asdict(inventory), "logs": logs, "processes": processes}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv)
