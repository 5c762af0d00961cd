"""``gpudock logs JOB [-f]``: a job's output, or its state and why when it has none yet."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import fail, note

STREAM_END = "[gpudock] stream ended: "
"""The server's last line of a follow it ended (``services/job_logs.STREAM_END``)."""
WAITING = ("PENDING", "ALLOCATED")
"""States before a container exists: no logs yet (a requeued job keeps its earlier ones)."""

POLL_SECONDS = 1.0


def logs(
    job_id: int,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="wait for the job to start, then stream until it ends"),
    ] = False,
) -> None:
    """Print a job's logs (archived after the container is gone).

    A job with no logs yet gets one line on stderr with its state and why (its
    pending reason); ``-f`` then waits for it to start, saying so when the reason
    changes, and follows its output until it ends.
    """
    client = Client()
    try:
        job = client.request("GET", f"/v1/jobs/{job_id}")
        if follow and job["state"] in WAITING:
            job = wait_started(client, job)
        written, tail = 0, b""
        for chunk in client.stream(f"/v1/jobs/{job_id}/logs", {"follow": follow}):
            written += len(chunk)
            tail = (tail + chunk)[-len(STREAM_END) - 64 :]
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        last = tail.endswith(b"\n") and tail[:-1].rsplit(b"\n", 1)[-1]
        if follow and last and last.startswith(STREAM_END.encode()):
            raise typer.Exit(1)  # the server cut the follow (a dead token); it said why
        if not written:
            if not follow:
                job = client.request("GET", f"/v1/jobs/{job_id}")
            note(no_logs_line(job, follow))
    except ClientError as exc:
        fail(exc.message)


def state_line(job: dict[str, Any]) -> str:
    """``job 7 is PENDING: needs 8 GPUs, 4 are free`` (the first pending reason, or the
    job's own reason; nothing after the state when it has neither)."""
    reasons = job.get("pending_reasons") or []
    why = reasons[0]["message"] if job["state"] == "PENDING" and reasons else job.get("reason")
    if job["state"] == "ALLOCATED" and job.get("node"):
        why = f"allocated on {job['node']}, starting"
    return f"job {job['id']} is {job['state']}" + (f": {why}" if why else "")


def no_logs_line(job: dict[str, Any], follow: bool) -> str:
    """What to say when the job has written nothing (yet)."""
    if job["state"] in WAITING:
        return f"{state_line(job)}; no logs yet (gpudock logs -f {job['id']} waits for it)"
    if follow:
        return f"{state_line(job)}; it wrote no logs"
    return f"{state_line(job)}; no logs"


def wait_started(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Poll until the job leaves PENDING/ALLOCATED; one stderr line per change of
    state or reason. Returns the job as last read."""
    said = state_line(job)
    note(f"{said}; waiting for it to start… (Ctrl-C stops waiting, not the job)")
    while job["state"] in WAITING:
        time.sleep(POLL_SECONDS)
        job = client.request("GET", f"/v1/jobs/{job['id']}")
        line = state_line(job)
        if line != said and job["state"] in WAITING:
            note(line)
        said = line
    return job
