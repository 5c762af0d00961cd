"""``gpudock submit``: a job from flags, a YAML or JSON job file, or both.

Light at import, like every client command (``gpudock.cli.common``). The CLI
refuses only what it cannot send (a ``KEY=VALUE`` without ``=``, a NaN, an
unreadable or malformed ``-f`` file: ``FILE:LINE:COL: problem``); the server
validates the spec. ``-v`` is ``--mount``, which also takes Docker's
``type=bind,src=…,dst=…[,readonly]`` (the server translates it:
``core/mount_forms.py``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from gpudock.cli import watch_cmd
from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import Output, check_output, fail, note, parse_pairs, print_json, usage
from gpudock.docfile import DocumentError, key_positions, load_document

SUBMIT_SETTINGS = {"allow_interspersed_args": False}
"""Everything after IMAGE is the job's command, options included."""


def _gpus_flag(value: str) -> int | str:
    """``--gpus``: a count, or ``MIN-MAX`` (an elastic job; the server checks the range)."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    low, dash, high = text.partition("-")
    if dash and low.strip().isdigit() and high.strip().isdigit():
        return text
    usage(f"invalid value for '--gpus': {value!r} is not a number or a range MIN-MAX")


def submit(
    image: Annotated[str | None, typer.Argument(help="container image")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="command after --")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="job spec file, YAML (or .json)")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option(help="number of GPUs, or MIN-MAX for an elastic job")
    ] = None,
    elastic: Annotated[
        str | None, typer.Option(help="restart: the running job may be restarted on more GPUs")
    ] = None,
    gpu_memory: Annotated[str | None, typer.Option(help="per-GPU share, e.g. 20GiB")] = None,
    gpu_model: Annotated[str | None, typer.Option(help="GPU model, e.g. H100")] = None,
    mig: Annotated[
        str | None, typer.Option(help="one MIG device of this profile, e.g. 1g.10gb")
    ] = None,
    queue: Annotated[str | None, typer.Option()] = None,
    priority: Annotated[int | None, typer.Option(help="users may only lower it")] = None,
    priority_class: Annotated[str | None, typer.Option(help="an admin-defined class")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V, repeatable")] = None,
    label: Annotated[list[str] | None, typer.Option(help="K=V, repeatable")] = None,
    mount: Annotated[
        list[str] | None,
        typer.Option(
            "--mount",
            "-v",
            help="/host:/ctr[:rw] (read-only unless :rw), or Docker's "
            "type=bind,src=/host,dst=/ctr[,readonly]; repeatable",
        ),
    ] = None,
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
    from_file = set(data)
    flags: dict[str, Any] = {
        "image": image,
        "gpus": None if gpus is None else _gpus_flag(gpus),
        "elastic": elastic,
        "gpu_memory": gpu_memory,
        "gpu_model": gpu_model,
        "mig": mig,
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
    given = {k: v for k, v in flags.items() if v is not None}
    from_file -= set(given)
    data.update(given)
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
        usage("an image is required: gpudock submit [OPTIONS] IMAGE [-- CMD…], or -f job.yaml")
    check_finite(data)
    try:
        job = post_job(data)
    except SpecRefused as refused:
        where = _position(file, refused.field) if file and refused.field in from_file else ""
        fail(where + refused.message, refused.code)
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


class SpecRefused(Exception):
    """The server refused the job: ``message`` to print, ``code`` to exit with,
    ``field`` the first spec field it blames (None: none)."""

    def __init__(self, message: str, code: int, field: str | None) -> None:
        super().__init__(message)
        self.message, self.code, self.field = message, code, field


def post_job(data: dict[str, Any]) -> Any:
    """``POST /v1/jobs``: the server validates the spec. ``SpecRefused`` when it refuses:
    an invalid spec (422 ``InvalidInput``, exit 2) reads ``invalid job spec: FIELD: why``;
    a job that can never run (422 ``Infeasible``) and every other refusal exit 1."""
    try:
        return Client().request("POST", "/v1/jobs", json=data)
    except ClientError as exc:
        invalid = exc.status == 422 and exc.code == "InvalidInput"
        field = exc.field.split(",")[0] if exc.field else None
        message = ("invalid job spec: " if invalid else "") + exc.message
        raise SpecRefused(message, exc.exit_code, field) from None


def _position(path: Path, field: str | None) -> str:
    """``job.yaml:3:1: `` where ``field`` is a top-level key of the file; else nothing."""
    found = key_positions(path).get(field or "")
    return f"{path}:{found[0]}:{found[1]}: " if found else ""


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
    """The job spec in ``path`` (YAML, or JSON for ``.json``); exit 2 with one line,
    ``FILE:LINE:COL: problem`` for a syntax error, when it is not a readable mapping."""
    try:
        data = load_document(path)
    except DocumentError as exc:
        fail(str(exc), 2)
    if not isinstance(data, dict):
        fail(f"{path} must hold a mapping of job fields (image, gpus, …)", 2)
    return data
