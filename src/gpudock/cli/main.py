"""The ``gpudock`` command line (typer; rich only where a table is drawn).

Every command is registered on ``app`` below. A command module imports at its
top only light modules (see ``gpudock.cli.common``), so that ``gpudock --help``
and the client commands never load the server; register a new one here with a
line or two: ``from gpudock.cli.x_cmd import x`` and ``app.command()(x)`` (or
``app.add_typer(x_app, name="x")``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from gpudock import __version__, _native
from gpudock.cli import params, watch_cmd
from gpudock.cli.admin_cmd import admin_app
from gpudock.cli.client import Client, ClientError
from gpudock.cli.cluster_cmd import register as register_cluster
from gpudock.cli.common import (
    Output,
    call,
    check_output,
    err,
    fail,
    json_text,
    note,
    out,
    parse_pairs,
    print_json,
)
from gpudock.cli.control_cmd import exec_command, hold, release, requeue, update
from gpudock.cli.events_cmd import events_command
from gpudock.cli.logs_cmd import logs
from gpudock.cli.registry_cmd import registry_app
from gpudock.cli.server_cmd import server
from gpudock.cli.simulate_cmd import simulate_command
from gpudock.cli.token_cmd import token_app
from gpudock.cli.top_cmd import top_command

params.install()  # plain int/str/Path conversion: no pydantic on the client's path
app = typer.Typer(
    name="gpudock",
    help="GPU cluster manager for Docker containers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain help: rendering it with rich costs more than the rest
)
app.add_typer(token_app, name="token")
app.add_typer(admin_app, name="admin")
app.add_typer(registry_app, name="registry")
app.command("events")(events_command)
app.command("top")(top_command)

__all__ = ["app", "call", "err", "fail", "main", "out", "parse_pairs"]


@app.command()
def version() -> None:
    """Print the gpudock version, and whether the scheduler runs compiled."""
    out.print(__version__)
    out.print(f"scheduler: {_native.describe()}")


def _gpus_flag(value: str) -> int | str:
    """``--gpus``: a count, or ``MIN-MAX`` (an elastic job; the server checks the range)."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    low, dash, high = text.partition("-")
    if dash and low.strip().isdigit() and high.strip().isdigit():
        return text
    fail(f"Invalid value for '--gpus': {value!r} is not a number or a range MIN-MAX.", 2)


@app.command(context_settings={"allow_interspersed_args": False})
def submit(
    image: Annotated[str | None, typer.Argument(help="container image")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="command after --")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="YAML job spec")] = None,
    gpus: Annotated[
        str | None, typer.Option(help="number of GPUs, or MIN-MAX for an elastic job")
    ] = None,
    elastic: Annotated[
        str | None, typer.Option(help="restart: the running job may be restarted on more GPUs")
    ] = None,
    gpu_memory: Annotated[str | None, typer.Option(help="per-GPU share, e.g. 20GiB")] = None,
    gpu_model: Annotated[str | None, typer.Option(help="GPU model, e.g. H100")] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    priority: Annotated[int | None, typer.Option(help="users may only lower it")] = None,
    priority_class: Annotated[str | None, typer.Option(help="an admin-defined class")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V, repeatable")] = None,
    label: Annotated[list[str] | None, typer.Option(help="K=V, repeatable")] = None,
    mount: Annotated[list[str] | None, typer.Option(help="/host:/ctr[:rw], repeatable")] = None,
    cpus: Annotated[float | None, typer.Option()] = None,
    memory: Annotated[str | None, typer.Option(help="memory limit, e.g. 8GiB")] = None,
    shm_size: Annotated[str | None, typer.Option(help="/dev/shm size")] = None,
    max_runtime: Annotated[str | None, typer.Option(help="e.g. 2h")] = None,
    retries: Annotated[int | None, typer.Option()] = None,
    nodes: Annotated[
        int | None, typer.Option(help="a gang: --gpus on each of this many nodes (Swarm)")
    ] = None,
    selector: Annotated[
        list[str] | None, typer.Option(help="node label KEY=VALUE the node must have; repeatable")
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option(help="tolerate a taint: KEY=VALUE[:NoSchedule], KEY or '*'; repeatable"),
    ] = None,
    topology: Annotated[
        str | None, typer.Option(help="nvlink or numa: all GPUs in one NVLink domain/NUMA node")
    ] = None,
    after: Annotated[
        list[int] | None, typer.Option(help="start after JOB ends; repeatable")
    ] = None,
    after_ok: Annotated[
        list[int] | None, typer.Option(help="start after JOB succeeds (else cancel); repeatable")
    ] = None,
    array: Annotated[
        str | None, typer.Option(help="job array FIRST-LAST[%LIMIT], e.g. 0-99%8")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="wait, stream its logs, exit with its exit code")
    ] = False,
    output: Output = "table",
) -> None:
    """Submit a job: `gpudock submit --gpus 2 IMAGE -- CMD…` or `gpudock submit -f job.yaml`."""
    check_output(output)
    if command and command[0] == "--":
        command = command[1:]
    data: dict[str, Any] = load_spec_file(file) if file else {}
    flags: dict[str, Any] = {
        "image": image,
        "gpus": None if gpus is None else _gpus_flag(gpus),
        "elastic": elastic,
        "gpu_memory": gpu_memory,
        "gpu_model": gpu_model,
        "queue": queue,
        "priority": priority,
        "priority_class": priority_class,
        "name": name,
        "cpus": cpus,
        "memory": memory,
        "shm_size": shm_size,
        "max_runtime": max_runtime,
        "retries": retries,
        "nodes": nodes,
        "topology": topology,
        "command": command or None,
        "array": array,
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    for key, items, what in (
        ("env", env, "--env"),
        ("labels", label, "--label"),
        ("node_selector", selector, "--selector"),
    ):
        if items:
            data[key] = {**as_pairs(data.get(key), key), **parse_pairs(items, what)}
    lists = {"mounts": mount, "tolerations": toleration, "after": after, "after_ok": after_ok}
    for key, extra in lists.items():
        if extra:
            data[key] = [*as_list(data.get(key), key), *extra]
    if "image" not in data:
        fail("an image is required: gpudock submit [OPTIONS] IMAGE [-- CMD…], or -f job.yaml", 2)
    check_finite(data)
    job = post_job(data)
    if output == "json":
        print_json(job)
    else:
        print(job["id"], flush=True)
        if job.get("array_id") is not None:
            note(f"job array {job['id']}: one task per index of {job['spec']['array']}")
    if follow:
        raise typer.Exit(watch_cmd.follow(job["id"]))


def check_finite(data: dict[str, Any]) -> None:
    """JSON has no NaN or infinity: refuse them here, as the server would."""
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"invalid job spec: {key}: Input should be a finite number", 2)


def post_job(data: dict[str, Any]) -> Any:
    """``POST /v1/jobs``: the server validates the spec. A 422 exits 2; a field the
    server rejects reads ``invalid job spec: FIELD: why``."""
    try:
        return Client().request("POST", "/v1/jobs", json=data)
    except ClientError as exc:
        invalid = exc.status == 422 and exc.code == "InvalidInput"
        fail(("invalid job spec: " if invalid else "") + exc.message, 2 if exc.status == 422 else 1)


def as_pairs(value: Any, what: str) -> dict[str, str]:
    """A spec file's mapping field, also in its ``["KEY=VALUE"]`` list form, as a dict."""
    if value is None:
        return {}
    if isinstance(value, list):
        return parse_pairs([str(item) for item in value], what)
    if not isinstance(value, dict):
        fail(f"{what} must be a mapping of KEY: VALUE, got {value!r}", 2)
    return dict(value)


def as_list(value: Any, what: str) -> list[Any]:
    """A spec file's list field, to extend with the flags' items."""
    if value is None:
        return []
    if not isinstance(value, list):
        fail(f"{what} must be a list, got {value!r}", 2)
    return value


def load_spec_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", 2)
    except UnicodeDecodeError as exc:
        fail(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})", 2)
    except yaml.YAMLError as exc:
        fail(f"{path} is not valid YAML: {exc}", 2)
    if not isinstance(data, dict):
        fail(f"{path} must hold a mapping of job fields (image, gpus, …)", 2)
    return data


@app.command()
def jobs(
    state: Annotated[list[str] | None, typer.Option(help="filter; repeatable")] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    user: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option()] = 200,
    expand: Annotated[bool, typer.Option(help="one line per task of a job array")] = False,
    start: Annotated[bool, typer.Option(help="estimated start of each pending job")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="redraw every 2s")] = False,
    output: Output = "table",
) -> None:
    """List jobs (newest first); a job array is one line unless --expand; `--watch`
    redraws them in place until Ctrl-C."""
    check_output(output)
    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if queue:
        params["queue"] = queue
    if user:
        params["user"] = user
    if watch:
        watch_cmd.watch(lambda: jobs_text(listed(params, start), output, expand, start))
        return
    sys.stdout.write(jobs_text(listed(params, start), output, expand, start) + "\n")


def listed(params: dict[str, Any], start: bool) -> list[dict[str, Any]]:
    """One page of jobs; with ``start``, each carries its ``estimated_start``."""
    items: list[dict[str, Any]] = call("GET", "/v1/jobs", params=params)
    if start:
        from gpudock.cli import start_view

        estimates = start_view.fetch()
        for job in items:
            job["estimated_start"] = estimates.get(job["id"])
    return items


def jobs_text(items: list[dict[str, Any]], output: str, expand: bool, start: bool) -> str:
    """``gpudock jobs``' output for ``items``: JSON, a table, or ``no jobs``."""
    if output == "json":
        return json_text(items)
    if not items:
        return "no jobs"
    from gpudock.cli.arrays_view import fold
    from gpudock.cli.table import format_table

    columns: tuple[str, ...] = JOB_COLUMNS
    row: Callable[[dict[str, Any]], list[str]] = job_row
    if start:
        from gpudock.cli import start_view

        estimates = {j["id"]: j["estimated_start"] for j in items if j.get("estimated_start")}
        columns, row = (*JOB_COLUMNS[:-1], "START", "NOTE"), start_view.with_start(row, estimates)
    rows = [row(job) for job in items] if expand else fold(items, row)
    return format_table(columns, rows, sys.stdout.isatty())


JOB_COLUMNS = ("ID", "NAME", "USER", "QUEUE", "PRI", "STATE", "GPUS", "NODE", "TIME", "NOTE")


def job_row(job: dict[str, Any]) -> list[str]:
    """One ``gpudock jobs`` row (``JOB_COLUMNS``)."""
    from gpudock.cli.jobtext import age, gpus_text, job_note

    return [str(job["id"]), job["name"] or "-", job["user"], job["queue"], str(job["priority"]),
            job["state"], gpus_text(job), job["node"] or "-", age(job), job_note(job)]  # fmt: skip


@app.command()
def show(job_id: int, output: Output = "table") -> None:
    """Show one job: allocation, why it is pending, history."""
    check_output(output)
    job = call("GET", f"/v1/jobs/{job_id}")
    if output == "json":
        print_json(job)
    else:
        from gpudock.cli import render

        render.show_job(out, job)


@app.command()
def why(job_id: int, output: Output = "table") -> None:
    """Why is this job not running? Structured reasons with what would change it."""
    check_output(output)
    job = call("GET", f"/v1/jobs/{job_id}")
    from gpudock.cli import start_view

    estimate = start_view.fetch(job_id).get(job_id) if job["state"] == "PENDING" else None
    if output == "json":
        print_json({"id": job["id"], "state": job["state"], "reasons": job["pending_reasons"],
                    "estimated_start": estimate})  # fmt: skip
        return
    from gpudock.cli import render

    render.explain(out, job)
    if estimate is not None:
        print(f"estimated start: {start_view.start_text(estimate)}; {estimate['detail']}")


@app.command()
def cancel(
    job_id: int,
    wait: Annotated[float, typer.Option(help="seconds to wait for the job to end (0: don't)")] = 30,
) -> None:
    """Cancel a job (running containers get SIGTERM, then SIGKILL)."""
    job = call("POST", f"/v1/jobs/{job_id}/cancel")
    deadline = time.monotonic() + wait
    while (
        job["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
        job = call("GET", f"/v1/jobs/{job_id}")
    note = job["reason"] or ("cancellation requested" if job["cancel_requested"] else "")
    print(f"job {job_id} {job['state']}: {note}")


@app.command()
def gpus(output: Output = "table") -> None:
    """List GPUs and what holds them."""
    check_output(output)
    items = call("GET", "/v1/gpus")
    if output == "json":
        print_json(items)
    elif not items:
        out.print("no GPUs (start the server with --emulate-gpus 4xH100-80GB to try gpudock)")
    else:
        from gpudock.cli import render

        out.print(render.gpus_table(items))


@app.command()
def nodes(output: Output = "table") -> None:
    """List nodes and their availability."""
    check_output(output)
    items = call("GET", "/v1/nodes")
    if output == "json":
        print_json(items)
    else:
        from gpudock.cli import render

        out.print(render.nodes_table(items))


@app.command()
def queues(output: Output = "table") -> None:
    """Queues: usage against guarantee and limit, borrowing, fair share."""
    check_output(output)
    report = call("GET", "/v1/queues")
    if output == "json":
        print_json(report)
    else:
        from rich.markup import escape

        from gpudock.cli import render

        out.print(render.queues_table(report))
        for warning in report.get("warnings", []):
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)


# Commands in modules of their own (each light at import; see the module docstring).
app.command()(logs)
app.command()(server)
app.command("simulate")(simulate_command)
for control in (hold, release, requeue, update):
    app.command()(control)
app.command("exec", context_settings={"allow_interspersed_args": False})(exec_command)
register_cluster(app)  # node, swarm, job, agent


def register_server_command() -> None:
    """Kept for older callers: every command registers when this module loads."""


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        note("interrupted")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
