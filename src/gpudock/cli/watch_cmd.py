"""``gpudock jobs --watch`` and ``gpudock submit --follow`` (light at import).

``--watch`` redraws the job table in place every ``WATCH_SECONDS`` until
Ctrl-C (which exits 0, as ``watch`` does). On a terminal each frame replaces
the last (cursor home, clear); into a pipe, frames follow one another, each
after a line with the time, so the output stays readable.

``--follow`` waits for the job to start (one line per change of reason,
as ``gpudock logs -f``), streams its logs until it ends, then exits with
the job's exit code. A job that ended without one exits ``NO_EXIT_CODE``
(125, as ``docker run`` does for its own failures) with its state and
reason on stderr: cancelled, lost, or failed before its container ran.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import fail, note
from gpudock.cli.logs_cmd import WAITING, wait_started

WATCH_SECONDS = 2.0
NO_EXIT_CODE = 125
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")
_HOME_CLEAR = "\033[H\033[2J"


def watch(frame: Callable[[], str], seconds: float = WATCH_SECONDS) -> None:
    """Print ``frame()`` every ``seconds`` until Ctrl-C; in place on a terminal."""
    tty = sys.stdout.isatty()
    try:
        while True:
            text = frame()
            stamp = time.strftime("%F %T")
            if tty:
                sys.stdout.write(f"{_HOME_CLEAR}every {seconds:g}s · {stamp}\n\n{text}\n")
            else:
                sys.stdout.write(f"--- {stamp}\n{text}\n")
            sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        if tty:
            sys.stdout.write("\n")
        return


def follow(job_id: int) -> int:
    """Wait for the job, stream its logs until it ends; its exit code (see module doc)."""
    client = Client()
    try:
        job = client.request("GET", f"/v1/jobs/{job_id}")
        if job["state"] in WAITING:
            job = wait_started(client, job)
        for chunk in client.stream(f"/v1/jobs/{job_id}/logs", {"follow": True}):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        job = _ended(client, job_id)
    except ClientError as exc:
        fail(exc.message)
    return exit_code_of(job)


def _ended(client: Client, job_id: int) -> dict[str, Any]:
    """The job once it is terminal (its logs end a moment before its state is recorded).

    A job requeued meanwhile (preempted, or requeued by hand) is followed again.
    """
    while True:
        job: dict[str, Any] = client.request("GET", f"/v1/jobs/{job_id}")
        if job["state"] in TERMINAL:
            return job
        if job["state"] in WAITING:
            note(f"job {job_id} is {job['state']} again: {job.get('reason') or 'requeued'}")
            job = wait_started(client, job)
            for chunk in client.stream(f"/v1/jobs/{job_id}/logs", {"follow": True}):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            continue
        time.sleep(0.5)


def exit_code_of(job: dict[str, Any]) -> int:
    """The job's exit code; ``NO_EXIT_CODE`` (with a line on stderr) when it has none,
    and a FAILED job never exits 0."""
    code = job.get("exit_code")
    state, reason = job["state"], job.get("reason") or ""
    if state == "SUCCEEDED":
        return 0
    note(f"job {job['id']} {state}" + (f": {reason}" if reason else ""))
    if code is None or code == 0:
        return NO_EXIT_CODE
    return int(code)
