"""The ``gpudock`` command line (typer + rich)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from gpudock import __version__, _native
from gpudock.cli import render
from gpudock.cli.client import Client, ClientError
from gpudock.cli.events_cmd import events_command
from gpudock.cli.top_cmd import top_command
from gpudock.config import format_validation_error
from gpudock.core.job import JobSpec

app = typer.Typer(
    name="gpudock",
    help="GPU cluster manager for Docker containers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
token_app = typer.Typer(help="Manage API tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")
app.command("events")(events_command)
app.command("top")(top_command)
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)

Output = Annotated[str, typer.Option("--output", "-o", help="table or json")]


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def call(method: str, path: str, **kwargs: Any) -> Any:
    try:
        return Client().request(method, path, **kwargs)
    except ClientError as exc:
        fail(exc.message, 2 if exc.status == 422 else 1)


def check_output(output: str) -> None:
    if output not in ("table", "json"):
        fail(f"--output must be 'table' or 'json', got {output!r}", 2)


def parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{what} {item!r} must look like KEY=VALUE", 2)
        pairs[key] = value
    return pairs


@app.command()
def version() -> None:
    """Print the gpudock version, and whether the scheduler runs compiled."""
    out.print(__version__)
    out.print(f"scheduler: {_native.describe()}")


@app.command(context_settings={"allow_interspersed_args": False})
def submit(
    image: Annotated[str | None, typer.Argument(help="container image")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="command after --")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="YAML job spec")] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs")] = None,
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
    output: Output = "table",
) -> None:
    """Submit a job: `gpudock submit --gpus 2 IMAGE -- CMD…` or `gpudock submit -f job.yaml`."""
    check_output(output)
    if command and command[0] == "--":
        command = command[1:]
    data: dict[str, Any] = load_spec_file(file) if file else {}
    flags: dict[str, Any] = {
        "image": image,
        "gpus": gpus,
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
        "topology": topology,
        "command": command or None,
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    for key, items, what in (
        ("env", env, "--env"),
        ("labels", label, "--label"),
        ("node_selector", selector, "--selector"),
    ):
        if items:
            data[key] = {**as_pairs(data.get(key), key), **parse_pairs(items, what)}
    for key, extra in (("mounts", mount), ("tolerations", toleration)):
        if extra:
            data[key] = [*as_list(data.get(key), key), *extra]
    if "image" not in data:
        fail("an image is required: gpudock submit [OPTIONS] IMAGE [-- CMD…], or -f job.yaml", 2)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        fail(f"invalid job spec: {format_validation_error(exc)}", 2)
    unset = {"priority"} - spec.model_fields_set  # the server gives the queue's default
    body = spec.model_dump(mode="json", exclude_none=True, exclude=unset)
    job = call("POST", "/v1/jobs", json=body)
    if output == "json":
        out.print_json(data=job)
    else:
        out.print(job["id"])


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
    output: Output = "table",
) -> None:
    """List jobs (newest first)."""
    check_output(output)
    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if queue:
        params["queue"] = queue
    if user:
        params["user"] = user
    items = call("GET", "/v1/jobs", params=params)
    if output == "json":
        out.print_json(data=items)
    elif not items:
        out.print("no jobs")
    else:
        out.print(render.jobs_table(items))


@app.command()
def show(job_id: int, output: Output = "table") -> None:
    """Show one job: allocation, why it is pending, history."""
    check_output(output)
    job = call("GET", f"/v1/jobs/{job_id}")
    if output == "json":
        out.print_json(data=job)
    else:
        render.show_job(out, job)


@app.command()
def why(job_id: int, output: Output = "table") -> None:
    """Why is this job not running? Structured reasons with what would change it."""
    check_output(output)
    job = call("GET", f"/v1/jobs/{job_id}")
    if output == "json":
        out.print_json(
            data={"id": job["id"], "state": job["state"], "reasons": job["pending_reasons"]}
        )
        return
    render.explain(out, job)


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
    out.print(f"job {job_id} {job['state']}: {note}", highlight=False)


@app.command()
def logs(
    job_id: int,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the job ends")
    ] = False,
) -> None:
    """Print a job's logs (archived after the container is gone)."""
    client = Client()
    try:
        if follow:
            _wait_started(client, job_id)
        for chunk in client.stream(f"/v1/jobs/{job_id}/logs", {"follow": follow}):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    except ClientError as exc:
        fail(exc.message)


def _wait_started(client: Client, job_id: int) -> None:
    announced = False
    while True:
        job = client.request("GET", f"/v1/jobs/{job_id}")
        if job["state"] not in ("PENDING", "ALLOCATED"):
            return
        if not announced:
            err.print(f"job {job_id} is {job['state']}; waiting for it to start…")
            announced = True
        time.sleep(1)


@app.command()
def gpus(output: Output = "table") -> None:
    """List GPUs and what holds them."""
    check_output(output)
    items = call("GET", "/v1/gpus")
    if output == "json":
        out.print_json(data=items)
    elif not items:
        out.print("no GPUs (start the server with --emulate-gpus 4xH100-80GB to try gpudock)")
    else:
        out.print(render.gpus_table(items))


@app.command()
def nodes(output: Output = "table") -> None:
    """List nodes and their availability."""
    check_output(output)
    items = call("GET", "/v1/nodes")
    if output == "json":
        out.print_json(data=items)
    else:
        out.print(render.nodes_table(items))


@app.command()
def queues(output: Output = "table") -> None:
    """Queues: usage against guarantee and limit, borrowing, fair share."""
    check_output(output)
    report = call("GET", "/v1/queues")
    if output == "json":
        out.print_json(data=report)
    else:
        out.print(render.queues_table(report))
        for warning in report.get("warnings", []):
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Option(help="user the token acts as")],
    admin: Annotated[bool, typer.Option(help="make an admin token")] = False,
) -> None:
    """Create an API token (admin only). Printed once; store it safely."""
    result = call("POST", "/v1/tokens", json={"user": user, "admin": admin})
    out.print(result["token"], highlight=False)


def register_server_command() -> None:
    from gpudock.cli.server_cmd import server
    from gpudock.cli.simulate_cmd import simulate_command

    app.command()(server)
    app.command("simulate")(simulate_command)


def main() -> None:
    register_server_command()
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
