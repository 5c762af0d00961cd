"""``gpudock events``: print (and with ``-f`` follow) the server's event log.

Talks to ``GET /v1/events`` only; imports nothing server-side.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Annotated, Any

import typer

from gpudock.cli.client import Client, ClientError
from gpudock.cli.common import check_output, fail, usage
from gpudock.cli.jsontime import iso_times

PAGE = 500


def summary(event: dict[str, Any]) -> str:
    """One line saying what the event records."""
    p: dict[str, Any] = event.get("payload") or {}
    kind = event.get("type")
    if kind == "job.state":
        text = f"{p.get('from') or 'new'} → {p.get('to')}"
        return f"{text}: {p['reason']}" if p.get("reason") else text
    if kind == "job.placed":
        return f"placed on {event.get('node')} GPUs {','.join(p.get('gpus') or []) or '-'}"
    if kind == "job.preempted":
        who = "/".join(str(p[k]) for k in ("preemptor_user", "preemptor_queue") if p.get(k))
        klass = f", class {p['preemptor_class']}" if p.get("preemptor_class") else ""
        return f"preempted by job {p.get('preemptor')} ({who}{klass})"
    if kind == "job.changed":
        changes = ", ".join(f"{k}={v}" for k, v in (p.get("changes") or {}).items())
        return f"{p.get('action')} by {p.get('by')}" + (f": {changes}" if changes else "")
    if kind == "job.watchdog_kill":
        if p.get("reason"):
            return f"stopped: {p['reason']}"
        return f"stopped: ran past max_runtime {p.get('max_runtime')}s"
    if kind == "node.health":
        text = f"node {p.get('from')} → {p.get('to')}"
        return f"{text}: {p['reason']}" if p.get("reason") else text
    if kind == "gpu.health":
        text = f"GPU {p.get('index')} ({p.get('uuid')}) {p.get('from')} → {p.get('to')}"
        return f"{text}: {p['reason']}" if p.get("reason") else text
    if kind == "gpu.fault":
        return f"GPU {p.get('uuid')}: {p.get('summary')} ({p.get('class')})"
    if kind == "gpu.stray_process":
        killed = ", killed" if p.get("killed") else ""
        return f"GPU {p.get('uuid')}: pid {p.get('pid')} of no job{killed}"
    return json.dumps(p, sort_keys=True)


def line(event: dict[str, Any]) -> str:
    at = datetime.fromtimestamp(float(event["at"])).strftime("%Y-%m-%d %H:%M:%S")
    job = f"job {event['job']}" if event.get("job") is not None else (event.get("node") or "-")
    owner = f"{event.get('user')}/{event.get('queue')}" if event.get("user") else ""
    return f"{event['id']:>6}  {at}  {event['type']:<17} {job:<10} {owner:<20} {summary(event)}"


def _page(client: Client, params: dict[str, Any]) -> dict[str, Any]:
    try:
        page: dict[str, Any] = client.request("GET", "/v1/events", params=params)
    except ClientError as exc:
        fail(exc.message, exc.exit_code)
    return page


def _emit(events: list[dict[str, Any]], output: str) -> None:
    """One line per event on stdout (plain text: no rich on this path)."""
    for event in events:
        text = json.dumps(iso_times(event), sort_keys=True) if output == "json" else line(event)
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


def events_command(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events")
    ] = False,
    job: Annotated[int | None, typer.Option("--job", help="only this job's events")] = None,
    type: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            "-t",
            help="job.state, job.placed, job.preempted, job.watchdog_kill, node.health, "
            "gpu.health, gpu.fault, gpu.stray_process, or job/node/gpu; repeatable",
        ),
    ] = None,
    since: Annotated[int, typer.Option(help="start after this event id")] = 0,
    interval: Annotated[float, typer.Option(help="seconds between polls with -f")] = 0.5,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json (one per line)")] = (
        "table"
    ),
) -> None:
    """Print the event log (state changes, placements, preemptions, health), oldest first."""
    check_output(output)
    if not interval > 0:
        usage("--interval must be a positive number of seconds")
    client = Client()
    params: dict[str, Any] = {"since": since, "limit": PAGE}
    if job is not None:
        params["job"] = job
    if type:
        params["type"] = type
    try:
        while True:
            page = _page(client, params)
            _emit(page["events"], output)
            params["since"] = page["next"]
            if len(page["events"]) == PAGE:
                continue
            if not follow:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
