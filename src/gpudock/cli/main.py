"""The ``gpudock`` command line (typer; rich only where a table is drawn).

Every command is registered on ``app`` below. A command module imports at its
top only light modules (see ``gpudock.cli.common``), so that ``gpudock --help``
and the client commands never load the server; register a new one here with a
line or two: ``from gpudock.cli.x_cmd import x`` and ``app.command()(x)`` (or
``app.add_typer(x_app, name="x")``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
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
from gpudock.cli.control_cmd import cancel, exec_command, hold, release, requeue, update
from gpudock.cli.events_cmd import events_command
from gpudock.cli.gpu_cmd import gpu_app, mig_app
from gpudock.cli.logs_cmd import logs
from gpudock.cli.registry_cmd import registry_app
from gpudock.cli.server_cmd import server
from gpudock.cli.simulate_cmd import simulate_command
from gpudock.cli.submit_cmd import SUBMIT_SETTINGS, submit
from gpudock.cli.token_cmd import token_app
from gpudock.cli.top_cmd import top_command
from gpudock.cli.usage import HELP_OPTIONS, GpudockGroup

params.install()  # plain int/str/Path conversion: no pydantic on the client's path
app = typer.Typer(
    name="gpudock",
    help="GPU cluster manager for Docker containers.",
    cls=GpudockGroup,  # one-line usage errors, plain help (``cli/usage.py``)
    context_settings=HELP_OPTIONS,  # -h is --help, in every command
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain help: rendering it with rich costs more than the rest
)
app.add_typer(token_app, name="token")
app.add_typer(admin_app, name="admin")
app.add_typer(registry_app, name="registry")
app.add_typer(gpu_app, name="gpu")
app.add_typer(mig_app, name="mig")
app.command("events")(events_command)
app.command("top")(top_command)

__all__ = ["Client", "ClientError", "app", "call", "err", "fail", "main", "out", "parse_pairs"]


@app.command()
def version() -> None:
    """Print the gpudock version, and whether the scheduler runs compiled."""
    out.print(__version__)
    out.print(f"scheduler: {_native.describe()}")


app.command(context_settings=SUBMIT_SETTINGS)(submit)


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


app.command()(cancel)


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
