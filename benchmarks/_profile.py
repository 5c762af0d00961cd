"""Where a server's GIL-holding time goes: ``py-spy record --gil`` over a load, summarised.

Not a benchmark itself (``results.py`` lists ``benchmarks/*.py`` not starting
with ``_``). ``Profile(pid, out)`` starts py-spy on a process and its
children (``--subprocesses --threads --gil``) and ``stop()`` ends it and
returns the summary of what it sampled while the GIL was held:

* ``samples``: how many;
* ``threads``: the share of samples per kind of thread: ``event loop`` (a
  process's main thread, where uvicorn's loop runs), ``request threads``
  (the thread pool that runs endpoints), ``controller`` (gpudock's
  ``gpudock-*`` threads), ``other``;
* ``on_loop``: the share of all samples that were on an event loop and inside
  each of a few named steps (a sample inside two steps counts in both):
  FastAPI's dependency solving, the hand-off to the thread pool, the response
  check and encoding, the HTTP parser and protocol, the middleware;
* ``leaf``: the share of samples by the package of the innermost frame that
  belongs to a known package (``sqlalchemy``, ``fastapi``, ``gpudock``, ...).

Raw samples are kept in ``out`` (py-spy's ``raw`` format) to look into.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

LOOP_STEPS = {
    "dependencies": r"solve_dependencies",
    "thread hand-off": r"run_in_threadpool|to_thread\.py|_backends/_asyncio\.py",
    "response check and encoding": r"serialize_response|jsonable_encoder|json/encoder",
    "http protocol": r"uvicorn/protocols",
    "middleware": r"gpudock/api/edge\.py|starlette/middleware",
}
PACKAGES = (
    "sqlalchemy",
    "sqlite3",
    "psycopg",
    "fastapi",
    "starlette",
    "anyio",
    "pydantic",
    "uvicorn",
    "asyncio",
    "logging",
    "gpudock",
)


class Profile:
    """py-spy sampling ``pid`` and its children until ``stop``."""

    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.out = out
        spy = Path(sys.executable).parent / "py-spy"
        flags = ["--gil", "--subprocesses", "--threads", "-r", str(rate)]
        self.proc = subprocess.Popen(
            [str(spy), "record", *flags, "-f", "raw", "-o", str(out), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        return summarise(self.out.read_text() if self.out.exists() else "")


def summarise(raw: str) -> dict[str, Any]:
    """The summary (see the module) of py-spy ``raw`` output."""
    total, threads, steps, leaves = 0, Counter[str](), Counter[str](), Counter[str]()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        kind = _thread_kind(stack)
        threads[kind] += n
        if kind == "event loop":
            for step, pattern in LOOP_STEPS.items():
                if re.search(pattern, stack):
                    steps[step] += n
        leaves[_leaf_package(stack)] += n

    def shares(counter: Counter[str]) -> dict[str, float]:
        return {k: round(100 * v / max(1, total), 1) for k, v in counter.most_common()}

    return {
        "samples": total,
        "threads": shares(threads),
        "on_loop": shares(steps),
        "leaf": shares(leaves),
    }


def _thread_kind(stack: str) -> str:
    match = re.search(r"thread \(\d+\): ([^;]*)", stack)
    name = match.group(1) if match else ""
    if name == "MainThread":
        return "event loop"
    if "AnyIO worker" in name:
        return "request threads"
    if name.startswith("gpudock-"):
        return "controller"
    return "other"


def _leaf_package(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        path = frame.rpartition("(")[2]
        for package in PACKAGES:
            if f"{package}/" in path or path.startswith(f"{package}."):
                return package
    return "other"
