"""Help for code running *inside* a gpudock job: keep PyTorch within the job's GPU share.

A shared job (``gpu_memory: 20GiB``) gets ``GPUDOCK_GPU_MEMORY_LIMIT_BYTES`` in
its env. PyTorch does not read it by itself; call this once, before the first
CUDA allocation::

    from gpudock.hints import apply_torch_limit
    apply_torch_limit()

Then an allocation past the share raises ``torch.OutOfMemoryError`` in the job
instead of the node's watchdog stopping it. Standard library only (PyTorch is
imported when called), so the module can be copied into an image on its own.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

LIMIT_ENV = "GPUDOCK_GPU_MEMORY_LIMIT_BYTES"


def memory_limit() -> int | None:
    """The job's GPU memory limit per GPU in bytes, or None (whole GPUs, or not in a job)."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def apply_torch_limit(torch: Any = None) -> dict[int, float]:
    """Cap PyTorch's caching allocator at the job's share on every visible GPU.

    Calls ``torch.cuda.set_per_process_memory_fraction(limit / total, device)``
    for each device and returns ``{device: fraction}``; returns ``{}`` (and does
    nothing) when the job has no limit or no CUDA device. ``torch`` defaults to
    the imported ``torch`` module. Idempotent.
    """
    limit = memory_limit()
    if limit is None:
        return {}
    if torch is None:
        torch = importlib.import_module("torch")  # only jobs that call this need PyTorch
    if not torch.cuda.is_available():
        return {}
    applied: dict[int, float] = {}
    for device in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = min(1.0, limit / total)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        applied[device] = fraction
    return applied
