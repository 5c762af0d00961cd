"""``gpudock cancel | hold | release | requeue | update | exec``: a user's controls on jobs.

Light at import, like every client command (``gpudock.cli.common``). Each
prints one line per job saying what changed (or the job as JSON with ``-o
json``); a refusal is the server's one line on stderr, exit 1 (2 for invalid
input). ``cancel``, ``hold``, ``release`` and ``requeue`` take several ids and
array tasks (``cli/job_ids.py``), act on each, and exit 1 if any failed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import Output, call, check_output, fail, print_json, usage
from gpudock.cli.job_ids import Resolver, parse_ids

EXEC_NO_CODE = 255
"""``gpudock exec``'s exit code when the engine could not tell the command's."""


JobIds = Annotated[
    list[str],
    typer.Argument(
        help="job ids; an array's tasks as ID_INDEX, ID[FIRST-LAST,...] or ID[*]",
        metavar="JOB_ID",
        show_default=False,
    ),
]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


Done = list[tuple[int, dict[str, Any]]]
"""The jobs an action was taken on: ``(job id, the job as the server answered)``."""


def each_job(
    words: list[str], action: str, params: dict[str, str] | None = None
) -> tuple[Done, int, bool]:
    """``POST /v1/jobs/ID/<action>`` for every job the words name, in order.

    A malformed word is a usage error (exit 2) before any request. A word or
    job that fails prints one ``error:`` line on stderr and the others go on;
    a server that cannot be reached stops it all (exit 1). Returns the jobs
    acted on, the number of failures, and whether the words named one job by
    its plain id (``-o json`` then prints one object).
    """
    try:
        parsed = parse_ids(words)
    except ValueError as exc:
        usage(str(exc))
    try:
        client = Client()
    except ClientError as exc:
        fail(exc.message)
    resolver = Resolver(client)
    done: Done = []
    failed = 0
    for word in parsed:
        try:
            ids = resolver.ids(word)
        except ClientError as exc:
            failed += _failed(exc)
            continue
        for job_id in ids:
            try:
                path = f"/v1/jobs/{job_id}/{action}"
                done.append((job_id, client.request("POST", path, params=params)))
            except ClientError as exc:
                failed += _failed(exc)
    return done, failed, len(parsed) == 1 and parsed[0].indices is None


def _failed(exc: ClientError) -> int:
    """Say why one job failed (1); a request that reached no server ends the command."""
    if exc.status is None:
        fail(exc.message)
    sys.stderr.write(f"error: {exc.message}\n")
    sys.stderr.flush()
    return 1


def _report(
    done: Done, failed: int, single: bool, output: str, line: Callable[[int, dict[str, Any]], str]
) -> None:
    """Each job's ``line`` (``-o json``: the job, or the list of them unless ``single``);
    exit 1 when any failed."""
    if output == "json":
        jobs = [job for _, job in done]
        if jobs or not single:
            print_json(jobs[0] if single else jobs)
    else:
        for job_id, job in done:
            print(line(job_id, job))
    if failed:
        raise typer.Exit(1)


def cancel(
    job_ids: JobIds,
    wait: Annotated[
        float, typer.Option(help="seconds to wait for the jobs to end (0: don't)")
    ] = 30,
) -> None:
    """Cancel jobs (running containers get SIGTERM, then SIGKILL): `gpudock cancel 42 43 40[0-7]`.

    Prints each job's state once it has ended, or when --wait runs out; exits 1
    if any job could not be cancelled (each such one gets an error line).
    """
    done, failed, _ = each_job(job_ids, "cancel")
    jobs = dict(done)
    client = Client()
    deadline = time.monotonic() + wait
    while True:
        active = [i for i, job in jobs.items() if job["state"] not in TERMINAL]
        if not active or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
        for job_id in active:
            with contextlib.suppress(ClientError):  # reported as it was last seen
                jobs[job_id] = client.request("GET", f"/v1/jobs/{job_id}")
    _report(list(jobs.items()), failed, False, "table", _cancelled)


def _cancelled(job_id: int, job: dict[str, Any]) -> str:
    note = job["reason"] or ("cancellation requested" if job["cancel_requested"] else "")
    return f"job {job_id} {job['state']}: {note}"


def hold(job_ids: JobIds, output: Output = "table") -> None:
    """Hold PENDING jobs: they are not scheduled until `gpudock release JOB…`."""
    check_output(output)
    _report(*each_job(job_ids, "hold"), output, lambda i, job: f"job {i} held by {job['held_by']}")


def release(job_ids: JobIds, output: Output = "table") -> None:
    """Release held jobs: the scheduler considers them again."""
    check_output(output)
    _report(
        *each_job(job_ids, "release"), output, lambda i, job: f"job {i} released ({job['state']})"
    )


def requeue(
    job_ids: JobIds,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="admins, Swarm: requeue now a job whose node is lost, stopping nothing "
            "(you vouch that its container stopped)",
        ),
    ] = False,
    output: Output = "table",
) -> None:
    """Put running jobs back in the queue: their containers stop; no retry is used."""
    check_output(output)
    if force:
        _report(
            *each_job(job_ids, "requeue", {"force": "true"}),
            output,
            lambda i, job: f"job {i} requeued ({job['state']}); its lost node was not asked",
        )
        return
    _report(
        *each_job(job_ids, "requeue"),
        output,
        lambda i, _: f"job {i} is being requeued (its container stops, then PENDING)",
    )


def _done(job: dict[str, Any], output: str, line: str) -> None:
    if output == "json":
        print_json(job)
    else:
        print(line)


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
        usage("nothing to update: give --priority-class, --max-runtime or --gpus")
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
        usage("a command is required: gpudock exec JOB -- CMD…")
    if interactive or tty:
        raise typer.Exit(_interactive(job_id, command, interactive, tty))
    client = Client()
    try:
        code = relay(client.stream(f"/v1/jobs/{job_id}/exec", None, "POST", {"command": command}))
    except ClientError as exc:
        fail(exc.message, exc.exit_code)
    raise typer.Exit(code)


def _interactive(job_id: int, command: list[str], interactive: bool, tty: bool) -> int:
    """``-it``: the command on a remote TTY fed by this terminal (``cli/exec_tty.py``)."""
    if not (interactive and tty):
        usage("-i and -t go together here: `gpudock exec -it JOB sh` for a shell, "
              "or neither to run a command")  # fmt: skip
    if not sys.stdin.isatty():
        fail("the input device is not a TTY: -it needs a terminal (drop -it to run a command)")
    from gpudock.cli import exec_tty

    try:
        return exec_tty.run(job_id, command)
    except ClientError as exc:
        fail(exc.message, exc.exit_code)


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
