"""A job's cells as text (GPUs, note, age), shared by the plain and the rich tables."""

from __future__ import annotations

import time
from typing import Any

from gpudock.core.units import format_duration, format_size


def gpus_text(job: dict[str, Any]) -> str:
    spec = job["spec"]
    if not spec["gpus"]:
        return "-"
    if spec.get("mig"):
        return f"mig {spec['mig']}"
    text = str(spec["gpus"])
    if spec.get("gpu_memory"):
        text += f"x{format_size(spec['gpu_memory'])}"
    if spec.get("gpu_model"):
        text += f" {spec['gpu_model']}"
    return text


def job_note(job: dict[str, Any]) -> str:
    """The list's NOTE: why a job waits or is held, else its last state change's reason."""
    if job["pending_reasons"]:  # PENDING, or an active job held (e.g. for the engine)
        return str(job["pending_reasons"][0]["message"])
    if job.get("cancel_requested") and job["state"] in ("STARTING", "RUNNING"):
        return "cancelling…"
    return job.get("reason") or ""


def age(job: dict[str, Any]) -> str:
    now = time.time()
    if job["state"] in ("RUNNING",) and job["started_at"]:
        return "run " + format_duration(now - job["started_at"])
    if job["finished_at"] and job["started_at"]:
        return "ran " + format_duration(job["finished_at"] - job["started_at"])
    return "wait " + format_duration((job["finished_at"] or now) - job["submitted_at"])
