"""Rich rendering of jobs, GPUs and nodes for the terminal."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpudock.cli.jobtext import age, gpus_text, job_note
from gpudock.core.units import format_duration, format_size

STATE_STYLE = {
    "PENDING": "yellow",
    "ALLOCATED": "cyan",
    "STARTING": "cyan",
    "RUNNING": "green",
    "SUCCEEDED": "bold green",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "LOST": "red",
}


TOPOLOGY_GROUP = {"nvlink": "one NVLink domain", "numa": "one NUMA node"}


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for col in ("ID", "NAME", "USER", "QUEUE", "PRI", "STATE", "GPUS", "NODE", "TIME", "NOTE"):
        table.add_column(col, no_wrap=col != "NOTE", overflow="fold")
    for job in jobs:
        state = job["state"]
        table.add_row(
            str(job["id"]),
            job["name"] or "-",
            job["user"],
            job["queue"],
            str(job["priority"]),
            f"[{STATE_STYLE.get(state, '')}]{state}[/]",
            gpus_text(job),
            job["node"] or "-",
            age(job),
            escape(job_note(job)),
        )
    return table


def show_job(console: Console, job: dict[str, Any]) -> None:
    spec = job["spec"]
    state = job["state"]
    console.print(
        f"[bold]job {job['id']}[/] {job['name'] or ''}  [{STATE_STYLE.get(state, '')}]{state}[/]"
    )
    rows: list[tuple[str, str]] = [
        ("user", job["user"]),
        ("queue", job["queue"]),
        ("priority", str(job["priority"])),
        ("image", spec["image"]),
        ("command", " ".join(spec["command"] or []) or "(image default)"),
        ("gpus", gpus_text(job)),
        ("attempt", f"{job['attempt']} (retries {spec['retries']})"),
    ]
    if job.get("reason"):
        rows.append(("reason", job["reason"]))
    if job.get("held_by") and state == "PENDING":
        rows.append(("held", f"by {job['held_by']} (gpudock release {job['id']} lets it run)"))
    if job.get("exit_code") is not None:
        rows.append(("exit code", str(job["exit_code"])))
    alloc = job.get("allocation")
    if job.get("gang"):  # a multi-node gang: each rank's node and GPUs
        for part in job["gang"]:
            gpus = ", ".join(part["gpus"]) or "no GPU"
            rows.append((f"rank {part['rank']}", f"{part['node']}: {gpus}"))
    elif alloc:
        share = f" ({format_size(alloc['memory_per_gpu'])} each)" if alloc["memory_per_gpu"] else ""
        rows.append(("allocation", f"{alloc['node']}: {', '.join(alloc['gpus'])}{share}"))
    if spec.get("mig"):
        rows.append(("mig", f"one {spec['mig']} device"))
    if (spec.get("gpu_memory") and spec.get("gpus")) or spec.get("mig"):
        rows.append(("memory limit", layers_text(job)))
    if spec.get("max_runtime"):
        rows.append(("max runtime", format_duration(spec["max_runtime"])))
    if job.get("preemption"):
        rows.append(("preemption", preemption_text(job["preemption"])))
    if spec.get("node_selector"):
        rows.append(("node selector", pairs_text(spec["node_selector"])))
    if spec.get("tolerations"):
        rows.append(("tolerations", ",".join(spec["tolerations"])))
    if spec.get("topology"):
        group = TOPOLOGY_GROUP.get(spec["topology"], spec["topology"])
        rows.append(("topology", f"{spec['topology']} (all GPUs in {group})"))
    for key in ("submitted_at", "allocated_at", "started_at", "finished_at"):
        if job.get(key):
            rows.append((key.removesuffix("_at"), time.strftime("%F %T", time.localtime(job[key]))))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        console.print(escape(f"  {key:<{width}}  {value}"), highlight=False)
    if job["pending_reasons"]:
        title = "why pending" if job["state"] == "PENDING" else "why held"
        console.print(f"  [bold]{title}[/]")
        for reason in job["pending_reasons"]:
            line = escape(f"    [{reason['layer']}] {reason['message']}")
            if reason.get("counterfactual"):
                line += escape(f" — {reason['counterfactual']}")
            console.print(line, highlight=False)
    if job.get("events"):
        console.print("  [bold]history[/]")
        for ev in job["events"]:
            ts = time.strftime("%T", time.localtime(ev["at"]))
            why = f"  {ev['reason']}" if ev.get("reason") else ""
            console.print(
                escape(f"    {ts}  {ev['from'] or '·'} → {ev['to']}{why}"), highlight=False
            )


def preemption_text(preemption: dict[str, Any], now: float | None = None) -> str:
    """``protected until 14:05:10 (8m20s left); a restart costs 1m00s`` for a job that
    holds GPUs (``JobDetailOut.preemption``)."""
    if not preemption["preemptible"]:
        return "never (preemptible: false)"
    cost = f"a restart costs {format_duration(preemption['restart_cost_s'])}"
    if preemption.get("lost_work_s"):
        cost += f" (of which {format_duration(preemption['lost_work_s'])} since its checkpoint)"
    until = preemption.get("protected_until")
    if until is None:
        return f"not protected; {cost}"
    left = max(0.0, until - (time.time() if now is None else now))
    when = time.strftime("%F %T", time.localtime(until))
    return f"protected until {when} ({format_duration(left)} left); {cost}"


LAYER_TEXT = {
    "mps": "MPS (the driver's limit)",
    "watchdog": "watchdog (stopped past it)",
    "hints": "framework hints (env)",
    "mig": "MIG (the hardware's partition)",
}


def layers_text(job: dict[str, Any]) -> str:
    """What holds a shared job to its share: its attempt's layers, strongest first."""
    layers = job.get("gpu_layers") or []
    compute = job["spec"].get("gpu_compute")
    text = ", ".join(LAYER_TEXT.get(layer, layer) for layer in layers)
    if not text:
        text = "set when it starts" if job["state"] in ("PENDING", "ALLOCATED", "STARTING") else "-"
    return text + (f"; compute {compute}%" if compute else "")


def pairs_text(pairs: dict[str, str]) -> str:
    """``{"a": "1", "b": "2"}`` -> ``a=1,b=2``; ``-`` when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted(pairs.items())) or "-"


def _id_text(value: int | None) -> str:
    return "-" if value is None else str(value)


def gpus_table(gpus: list[dict[str, Any]]) -> Table:
    """One row per GPU; NUMA is its host NUMA node, NVLINK its NVLink domain (``-``: none);
    HEALTH says why a GPU is out of service; each MIG device is a row under its GPU."""
    table = Table(box=None, header_style="bold")
    columns = (
        "NODE", "IDX", "UUID", "MODEL", "MEMORY", "USED", "MIG", "NUMA", "NVLINK", "HEALTH",
        "HELD BY", "RESERVED FOR",
    )  # fmt: skip
    for col in columns:
        table.add_column(col, no_wrap=True)
    for g in gpus:
        held = (
            f"job {g['exclusive_job']}"
            if g["exclusive_job"]
            else (f"{g['shared_jobs']} shared" if g["shared_jobs"] else "-")
        )
        model = g["name"]
        if g["emulated"] and "emulated" not in model:
            model += " (emulated)"
        mig = "-" if g["mig_mode"] is None else ("on" if g["mig_mode"] else "off")
        table.add_row(
            g["node"],
            str(g["index"]),
            g["uuid"],
            model,
            format_size(g["memory_total"]),
            format_size(g["used_memory"]),
            mig,
            _id_text(g.get("numa")),
            _id_text(g.get("nvlink")),
            escape(health_text(g)),
            held,
            reserved_text(g.get("reserved_for")),
        )
        for m in g.get("mig_devices") or []:
            table.add_row(
                "", f"{g['index']}/{m['slot']}", m["uuid"], f"MIG {m['profile']}",
                format_size(m["memory_total"]), "", "", "", "", "",
                f"job {m['job']}" if m.get("job") else "-", "",
            )  # fmt: skip
    return table


def health_text(gpu: dict[str, Any]) -> str:
    """``ok``, or ``quarantined: XID 79 (GPU has fallen off the bus)…``."""
    reason = gpu.get("health_reason")
    return f"{gpu['health']}: {reason}" if reason and gpu["health"] != "ok" else gpu["health"]


def reserved_text(reserved: dict[str, Any] | None) -> str:
    """``job 17 (≈ 14:05)``, ``another job (start unknown)``, or ``-`` (local time)."""
    if not reserved:
        return "-"
    who = f"job {reserved['job']}" if reserved.get("job") is not None else "another job"
    eta = reserved.get("eta")
    when = "start unknown" if eta is None else "≈ " + time.strftime("%H:%M", time.localtime(eta))
    return f"{who} ({when})"


def _swarm_state(node: dict[str, Any]) -> str:
    return f"{node.get('engine_state') or '-'}/{node.get('availability') or '-'}"


def _agent(node: dict[str, Any]) -> str:
    """``watched``, or what is missing: ``unwatched, unfenced`` (no agent) or ``silent``."""
    agent = node.get("agent") or "-"
    if agent == "unwatched":
        return "[red]unwatched, unfenced[/]"
    if node.get("fencing"):
        return f"{agent}, fencing"
    return agent if agent != "silent" else "[yellow]silent[/]"


def nodes_table(nodes: list[dict[str, Any]]) -> Table:
    """One row per node; CPUS and MEMORY are ``used/offered`` (``-``: not scheduled);
    SHARING is how its GPUs are shared (``exclusive``, ``mps``, ``time-slice``). On a
    Swarm, SWARM is its state/availability and AGENT says whether an agent watches
    (fences) it."""
    table = Table(box=None, header_style="bold")
    cluster = any(n.get("engine_state") is not None for n in nodes)
    columns = (
        "NODE", "STATUS", "GPUS", "IDLE", "CPUS", "MEMORY", "LABELS", "TAINTS", "SOURCE", "SHARING",
        "DRIVER", "CUDA", *(("SWARM", "AGENT") if cluster else ()), "NOTE",
    )  # fmt: skip
    for col in columns:
        table.add_column(col, no_wrap=col not in ("NOTE", "LABELS", "TAINTS"), overflow="fold")
    for n in nodes:
        style = "green" if n["status"] == "available" else "red"
        cpus = "-" if n.get("cpus") is None else f"{n.get('cpus_used', 0):g}/{n['cpus']:g}"
        memory = n.get("memory")
        if memory is not None:
            memory = f"{format_size(n.get('memory_used', 0))}/{format_size(memory)}"
        table.add_row(
            n["name"],
            f"[{style}]{n['status']}[/]",
            str(n["gpus_total"]),
            str(n["gpus_idle"]),
            cpus,
            memory or "-",
            escape(pairs_text(n.get("labels") or {})),
            escape(",".join(n.get("taints") or []) or "-"),
            n["gpu_source"],
            n.get("gpu_sharing") or "-",
            n["driver_version"] or "-",
            n["cuda_version"] or "-",
            *((_swarm_state(n), _agent(n)) if cluster else ()),
            escape("; ".join([*([n["status_reason"]] if n["status_reason"] else []),
                              *n.get("warnings", [])])),
        )  # fmt: skip
    return table


def explain(console: Console, job: dict[str, Any]) -> None:
    """``gpudock why``: one block per reason, or what the job is doing instead."""
    state = job["state"]
    reasons = job["pending_reasons"]
    if state != "PENDING":
        note = job.get("reason") or ""
        where = f" on {job['node']}" if job.get("node") else ""
        console.print(escape(f"job {job['id']} is {state}{where}" + (f": {note}" if note else "")))
        if reasons:  # held as it is (e.g. the engine does not describe its container)
            console.print("it is held because:")
            _reasons(console, reasons)
        return
    if not reasons:
        console.print(f"job {job['id']} is PENDING; the scheduler has not looked at it yet")
        return
    console.print(f"job {job['id']} is PENDING because:")
    _reasons(console, reasons)


def _reasons(console: Console, reasons: list[dict[str, Any]]) -> None:
    for reason in reasons:
        console.print(escape(f"  [{reason['layer']}] {reason['message']}"), highlight=False)
        if reason.get("counterfactual"):
            console.print(escape(f"      → {reason['counterfactual']}"), highlight=False)


def _gpus(vector: dict[str, Any] | None) -> str:
    if not vector or vector.get("gpus") is None:
        return "-"
    value = float(vector["gpus"])
    return f"{value:g}"


def queues_table(report: dict[str, Any]) -> Table:
    """``gpudock queues``: one row per queue, GPU-equivalents (shares count fractions).

    Admins' reports carry ``members``: a MEMBERS and a MAX PENDING column, and
    the groups as the caption. Users' get a YOU column: their pending jobs
    against the per-user limit, or ``not a member``.
    """
    table = Table(box=None, header_style="bold")
    admin = any("members" in q for q in report["queues"])
    columns = [
        "QUEUE",
        "COHORT",
        "WEIGHT",
        "RUNNING",
        "PENDING",
        "GPUS USED",
        "GUARANTEE",
        "LIMIT",
        "BORROWED",
        "FAIR SHARE",
        "SHARE",
    ]
    columns += ["MEMBERS", "MAX PENDING"] if admin else ["YOU"]
    for col in columns:
        table.add_column(col, no_wrap=col != "MEMBERS", overflow="fold")
    for q in report["queues"]:
        access = (
            [_members(q.get("members")), _limit(q.get("max_pending_per_user"))]
            if admin
            else [_standing(q.get("you"))]
        )
        table.add_row(
            q["name"],
            q["cohort"] or "-",
            f"{q['weight']:g}",
            str(q["running_jobs"]),
            str(q["pending_jobs"]),
            _gpus(q["usage"]),
            _gpus(q["guarantee"]),
            _gpus(q["limit"]) if q["limit"].get("gpus") is not None else "∞",
            _gpus(q["borrowed"]),
            _gpus(q["fair_share"]),
            f"{q['effective_share']:.2f}",
            *access,
        )
    groups = report.get("groups") or {}
    if groups:
        table.caption = escape(
            "groups: " + "; ".join(f"{g}={','.join(users) or '-'}" for g, users in groups.items())
        )
    return table


def _members(members: list[str] | None) -> str:
    return "everyone" if members is None else escape(",".join(members) or "nobody")


def _limit(value: int | None) -> str:
    return "∞" if value is None else str(value)


def _standing(you: dict[str, Any] | None) -> str:
    """The caller's standing in one queue: ``2/5 pending``, ``not a member``."""
    if not you:
        return "-"
    if not you.get("may_submit", True):
        return "not a member"
    limit = you.get("max_pending")
    return f"{you.get('pending', 0)}/{_limit(limit)} pending"
