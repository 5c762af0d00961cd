"""``gpudock top``: a live terminal view of the cluster, in the spirit of nvtop/htop.

GPUs as a grid coloured by allocation (who holds each one), running and
pending jobs (with the first pending reason), and queues against guarantee,
limit and fair share. Refreshes every ``--interval`` seconds; ``q`` quits.
Talks to ``/v1/nodes``, ``/v1/jobs`` and ``/v1/queues`` only; imports nothing
server-side, and rich only when it runs.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpudock.cli.client import Client, ClientError

if TYPE_CHECKING:
    from rich.console import RenderableType

ACTIVE = "RUNNING,STARTING,ALLOCATED,PENDING"
JOB_ROWS = 200  # jobs fetched per refresh; the screen shows what fits
HEAT = ((0.0, "grey30"), (0.01, "dark_goldenrod"), (0.5, "dark_orange3"), (0.99, "red3"))


@dataclass
class Frame:
    """One refresh's data, or the error that stopped it."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    queues: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    at: float = 0.0


def fetch(client: Client) -> Frame:
    """Nodes (with their GPUs), active jobs and the queue report; never raises."""
    try:
        return Frame(
            nodes=client.request("GET", "/v1/nodes"),
            jobs=client.request("GET", "/v1/jobs", params={"state": ACTIVE, "limit": JOB_ROWS}),
            queues=client.request("GET", "/v1/queues"),
            at=time.time(),
        )
    except ClientError as exc:
        return Frame(error=exc.message, at=time.time())


def top_command(
    interval: Annotated[float, typer.Option(help="seconds between refreshes", min=0.2)] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="print one frame and exit")] = False,
) -> None:
    """Live view of GPUs, jobs and queues (like nvtop/htop); press q to quit."""
    from rich.console import Console
    from rich.live import Live

    client = Client()
    console = Console()
    if once or not sys.stdin.isatty():
        frame = fetch(client)
        console.print(render(frame, console.size.width))
        if frame.error:
            raise typer.Exit(1)
        return
    with cbreak(), Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            live.update(render(fetch(client), console.size.width), refresh=True)
            if wait_for_quit(interval):
                return


@contextlib.contextmanager
def cbreak() -> Iterator[None]:
    """Keys arrive one at a time, unechoed; the terminal is restored on exit."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def wait_for_quit(seconds: float) -> bool:
    """Wait up to ``seconds`` for a key; True when it was ``q`` (or Ctrl-C/Ctrl-D)."""
    deadline = time.monotonic() + seconds
    fd = sys.stdin.fileno()
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            key = os.read(fd, 1)
            if key in (b"q", b"Q", b"\x03", b"\x04", b""):
                return True
    return False


def render(frame: Frame, width: int) -> RenderableType:
    """The whole screen for one frame."""
    from rich.console import Group
    from rich.text import Text

    if frame.error:
        return Text(f"gpudock top: {frame.error}", style="bold red")
    return Group(header(frame), gpu_grid(frame, width), jobs_table(frame), queues_table(frame))


def header(frame: Frame) -> RenderableType:
    from rich.text import Text

    gpus = [g for n in frame.nodes for g in n.get("gpus", [])]
    held = sum(1 for g in gpus if g.get("exclusive_job") or g.get("shared_jobs"))
    states = [j["state"] for j in frame.jobs]
    line = Text()
    line.append(" gpudock top ", style="bold white on dark_blue")
    line.append(f"  {len(frame.nodes)} nodes  {held}/{len(gpus)} GPUs in use  ")
    line.append(f"{states.count('RUNNING')} running  ", style="green")
    line.append(f"{states.count('PENDING')} pending  ", style="yellow")
    line.append(time.strftime("%H:%M:%S", time.localtime(frame.at)), style="dim")
    line.append("   q quit", style="dim")
    return line


def allocation(gpu: dict[str, Any]) -> float:
    """Fraction of the GPU booked: 1 when held whole, else shares' memory over total."""
    if gpu.get("exclusive_job"):
        return 1.0
    total = gpu.get("memory_total") or 0
    return min(1.0, (gpu.get("used_memory") or 0) / total) if total else 0.0


def heat_style(value: float) -> str:
    colour = HEAT[0][1]
    for threshold, name in HEAT:
        if value >= threshold:
            colour = name
    return f"bold white on {colour}"


def gpu_grid(frame: Frame, width: int) -> RenderableType:
    """One line per node (wrapping): each GPU a coloured cell naming its holder."""
    from rich.panel import Panel
    from rich.text import Text

    owners = {j["id"]: j["user"] for j in frame.jobs}
    cell = 14
    per_line = max(1, (width - 24) // (cell + 1))
    out = Text()
    for n, node in enumerate(frame.nodes):
        if n:
            out.append("\n")
        gpus = node.get("gpus", [])
        emulated = any(g.get("emulated") for g in gpus)
        status = "" if node.get("status") == "available" else f" {node.get('status')}"
        out.append(f"{node['name'][:15]:<15}", style="bold")
        out.append(f"{' emu' if emulated else '':<4}{status}", style="magenta")
        for i, gpu in enumerate(gpus):
            if i and i % per_line == 0:
                out.append("\n" + " " * 19)
            out.append(" ")
            out.append(
                f"{gpu_label(gpu, owners):<{cell}}"[:cell], style=heat_style(allocation(gpu))
            )
    if not frame.nodes:
        out.append("no nodes registered yet", style="dim")
    title = "GPUs (colour: allocation; emu = emulated, no real telemetry)"
    return Panel(out, title=title, title_align="left", border_style="blue")


def gpu_label(gpu: dict[str, Any], owners: dict[int, str]) -> str:
    index = gpu.get("index", "?")
    if gpu.get("health") not in (None, "ok"):
        return f"{index} {gpu['health']}"
    job = gpu.get("exclusive_job")
    if job:
        return f"{index} {owners.get(job, 'job')}:{job}"
    shared = gpu.get("shared_jobs") or 0
    if shared:
        return f"{index} {shared} shares {round(allocation(gpu) * 100)}%"
    return f"{index} idle"


def jobs_table(frame: Frame) -> RenderableType:
    """Running jobs first, then pending ones with why they wait."""
    from rich.table import Table

    table = Table(title="Jobs", title_justify="left", expand=True, show_edge=False)
    for name, kwargs in (
        ("ID", {"justify": "right"}),
        ("USER", {}),
        ("QUEUE", {}),
        ("STATE", {}),
        ("GPUS", {"justify": "right"}),
        ("NODE", {}),
        ("AGE", {"justify": "right"}),
        ("NAME / WHY PENDING", {"ratio": 1, "overflow": "ellipsis", "no_wrap": True}),
    ):
        table.add_column(name, **kwargs)
    order = {"RUNNING": 0, "STARTING": 1, "ALLOCATED": 2, "PENDING": 3}
    for job in sorted(frame.jobs, key=lambda j: (order.get(j["state"], 9), j["id"])):
        reasons = job.get("pending_reasons") or []
        why = f"{reasons[0]['layer']}: {reasons[0]['message']}" if reasons else ""
        style = "green" if job["state"] == "RUNNING" else "yellow" if reasons else "cyan"
        since = job.get("started_at") or job.get("submitted_at") or frame.at
        table.add_row(
            str(job["id"]),
            job["user"],
            job["queue"],
            job["state"],
            str((job.get("spec") or {}).get("gpus", "")),
            job.get("node") or "",
            age(frame.at - since),
            why or job.get("name") or "",
            style=style,
        )
    if not frame.jobs:
        table.add_row("", "", "", "no active jobs", "", "", "", "")
    return table


def queues_table(frame: Frame) -> RenderableType:
    from rich.table import Table

    table = Table(title="Queues (GPUs)", title_justify="left", expand=True, show_edge=False)
    for name in ("QUEUE", "RUN", "PEND", "USAGE", "GUARANTEE", "FAIR SHARE", "LIMIT"):
        table.add_column(name, justify="left" if name == "QUEUE" else "right")
    for q in frame.queues.get("queues", []):
        limit = (q.get("limit") or {}).get("gpus")
        table.add_row(
            q["name"],
            str(q.get("running_jobs", 0)),
            str(q.get("pending_jobs", 0)),
            f"{q['usage'].get('gpus', 0):g}",
            f"{q['guarantee'].get('gpus', 0):g}",
            f"{q['fair_share'].get('gpus', 0):.2f}",
            "-" if limit is None else f"{limit:g}",
        )
    return table


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
