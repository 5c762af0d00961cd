"""``gpudock hold | release | requeue | update | exec``: a user's controls on a job.

Light at import, like every client command (``gpudock.cli.common``). Each
prints one line saying what changed (or the job as JSON with ``-o json``);
a refusal is the server's one line on stderr, exit 1 (2 for invalid input).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Annotated, Any

import typer

from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import Output, call, check_output, fail, print_json

EXEC_NO_CODE = 255
"""``gpudock exec``'s exit code when the engine could not tell the command's."""


def _done(job: dict[str, Any], output: str, line: str) -> None:
    if output == "json":
        print_json(job)
    else:
        print(line)


def hold(job_id: int, output: Output = "table") -> None:
    """Hold a PENDING job: it is not scheduled until `gpudock release JOB`."""
    check_output(output)
    job = call("POST", f"/v1/jobs/{job_id}/hold")
    _done(job, output, f"job {job_id} held by {job['held_by']}")


def release(job_id: int, output: Output = "table") -> None:
    """Release a held job: the scheduler considers it again."""
    check_output(output)
    job = call("POST", f"/v1/jobs/{job_id}/release")
    _done(job, output, f"job {job_id} released ({job['state']})")


def requeue(
    job_id: int,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="admins: requeue now a job whose node is lost, stopping nothing (you vouch "
            "that its container stopped)",
        ),
    ] = False,
    output: Output = "table",
) -> None:
    """Put a running job back in the queue: its container is stopped; no retry is used."""
    check_output(output)
    job = call("POST", f"/v1/jobs/{job_id}/requeue", params={"force": "true"} if force else None)
    if force:
        _done(job, output, f"job {job_id} requeued ({job['state']}); its lost node was not asked")
    else:
        _done(job, output, f"job {job_id} is being requeued (its container stops, then PENDING)")


def update(
    job_id: int,
    priority_class: Annotated[str | None, typer.Option(help="a new priority class")] = None,
    max_runtime: Annotated[
        str | None, typer.Option(help="e.g. 2h; a running job's may only be lowered")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs (PENDING jobs)")] = None,
    output: Output = "table",
) -> None:
    """Change a PENDING job (checked as a submit would be); a running one: lower max_runtime."""
    check_output(output)
    body: dict[str, Any] = {}
    if priority_class is not None:
        body["priority_class"] = priority_class
    if max_runtime is not None:
        body["max_runtime"] = max_runtime
    if gpus is not None:
        body["gpus"] = gpus
    if not body:
        fail("nothing to update: give --priority-class, --max-runtime or --gpus", 2)
    job = call("PATCH", f"/v1/jobs/{job_id}", json=body)
    _done(job, output, f"job {job_id} updated: " + ", ".join(f"{k}={v}" for k, v in body.items()))


def exec_command(
    job_id: int,
    command: Annotated[list[str], typer.Argument(help="the command, after --")],
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="send your keys (with -t)")
    ] = False,
    tty: Annotated[bool, typer.Option("--tty", "-t", help="on a terminal (with -i)")] = False,
) -> None:
    """Run a command in a RUNNING job's container (yours only): `gpudock exec JOB -- CMD…`.

    Prints its stdout and stderr as they come and exits with its exit code.
    `gpudock exec -it JOB sh` opens an interactive shell on a terminal instead.
    """
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        fail("a command is required: gpudock exec JOB -- CMD…", 2)
    if interactive or tty:
        raise typer.Exit(_interactive(job_id, command, interactive, tty))
    client = Client()
    try:
        code = relay(client.stream(f"/v1/jobs/{job_id}/exec", None, "POST", {"command": command}))
    except ClientError as exc:
        fail(exc.message, 2 if exc.status == 422 else 1)
    raise typer.Exit(code)


def _interactive(job_id: int, command: list[str], interactive: bool, tty: bool) -> int:
    """``-it``: the command on a remote TTY fed by this terminal (``cli/exec_tty.py``)."""
    if not (interactive and tty):
        fail("-i and -t go together here: `gpudock exec -it JOB sh` for a shell, "
             "or neither to run a command", 2)  # fmt: skip
    if not sys.stdin.isatty():
        fail("the input device is not a TTY: -it needs a terminal (drop -it to run a command)")
    from gpudock.cli import exec_tty

    try:
        return exec_tty.run(job_id, command)
    except ClientError as exc:
        fail(exc.message, 2 if exc.status == 422 else 1)


def relay(lines: Any) -> int:
    """Write each NDJSON chunk to stdout or stderr; the final exit code (or
    ``EXEC_NO_CODE`` when the stream ended without one)."""
    buffer = b""
    for chunk in lines:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if not line:
                continue
            item = json.loads(line)
            if "exit_code" in item:
                code = item["exit_code"]
                return EXEC_NO_CODE if code is None else int(code)
            if "error" in item:
                sys.stderr.write(f"error: {item['error']}\n")
                continue
            target = sys.stderr if item["stream"] == "stderr" else sys.stdout
            target.buffer.write(base64.b64decode(item["data"]))
            target.flush()
    return EXEC_NO_CODE
