"""Resource vectors and the counting rule: what one job costs its queue.

A queue's usage is a vector over three resources, counted exactly
(``Quantity``: an ``int``, or a ``Fraction`` when not whole), so sums never
drift and a limit check is never off by a rounding error::

    gpus        GPU-equivalents
    gpu_memory  bytes of GPU memory
    cpus        CPU cores

Counting rule, per GPU a job holds (``job_usage``):

* exclusive job: 1 GPU-equivalent and the GPU's whole memory
  (``memory_total``), since nobody else can use it;
* shared job (``gpu_memory`` share): ``share / memory_total`` of a
  GPU-equivalent and ``share`` bytes. A ``gpus=1, gpu_memory=20GiB`` job on an
  80GiB GPU counts 0.25 GPUs and 20GiB.

* MIG job (one MIG device): its profile's compute slices over the GPU's
  (``1g.10gb`` of an A100's 7: 1/7 of a GPU-equivalent, ``3g.40gb`` 3/7) and
  the device's memory (``mig_usage``). A GPU in MIG mode counts in capacity
  as one GPU, so its devices add up to at most that.

A pending job is not placed yet, so admission uses ``pending_usage``: the same
rule against the GPUs it *could* run on, taking the costliest case for each
resource (the smallest eligible GPU for a share's GPU-equivalents, the largest
for an exclusive job's memory). The exact ``job_usage`` once placed is
therefore never more than what admission checked, component by component.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Resource = Literal["gpus", "gpu_memory", "cpus"]
RESOURCES: tuple[Resource, ...] = ("gpus", "gpu_memory", "cpus")
Quantity = int | Fraction  # exact; whole amounts stay ints (the fast path)
Number = int | float | Fraction
ZERO: Quantity = 0
GiB = 2**30


def exact(value: Number) -> Quantity:
    """``value`` exactly: an ``int`` when whole, else a ``Fraction``.

    Floats are read as their decimal text (0.1 -> 1/10).
    """
    if isinstance(value, int):
        return value
    fraction = Fraction(repr(value)) if isinstance(value, float) else value
    return fraction.numerator if fraction.denominator == 1 else fraction


@dataclass(frozen=True, slots=True)
class Resources:
    """An exact amount of each resource; build it with ``Resources.of``."""

    gpus: Quantity = ZERO
    gpu_memory: Quantity = ZERO
    cpus: Quantity = ZERO

    @classmethod
    def of(cls, gpus: Number = 0, gpu_memory: Number = 0, cpus: Number = 0) -> Resources:
        return cls(exact(gpus), exact(gpu_memory), exact(cpus))

    def get(self, resource: Resource) -> Quantity:
        value: Quantity = getattr(self, resource)
        return value

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus, self.gpu_memory + other.gpu_memory, self.cpus + other.cpus
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus - other.gpus, self.gpu_memory - other.gpu_memory, self.cpus - other.cpus
        )

    def times(self, count: int) -> Resources:
        """``count`` of this amount (``count`` jobs alike)."""
        return Resources(self.gpus * count, self.gpu_memory * count, self.cpus * count)

    def positive(self) -> Resources:
        """Each component clamped at zero: ``max(0, x)``."""
        return Resources(max(ZERO, self.gpus), max(ZERO, self.gpu_memory), max(ZERO, self.cpus))

    def to_dict(self) -> dict[str, float | int]:
        """Plain numbers: GPUs and CPUs as floats (4 decimals), memory in whole bytes."""
        return {
            "gpus": round(float(self.gpus), 4),
            "gpu_memory": int(self.gpu_memory),
            "cpus": round(float(self.cpus), 4),
        }


def total(vectors: Iterable[Resources]) -> Resources:
    """The component-wise sum (``Resources()`` when empty)."""
    result = Resources()
    for vector in vectors:
        result = result + vector
    return result


@dataclass(frozen=True, slots=True)
class Limits:
    """A cap per resource; None means unlimited."""

    gpus: Quantity | None = None
    gpu_memory: Quantity | None = None
    cpus: Quantity | None = None

    def get(self, resource: Resource) -> Quantity | None:
        value: Quantity | None = getattr(self, resource)
        return value

    def to_dict(self) -> dict[str, float | int | None]:
        def plain(resource: Resource, value: Quantity | None) -> float | int | None:
            if value is None:
                return None
            return int(value) if resource == "gpu_memory" else round(float(value), 4)

        return {r: plain(r, self.get(r)) for r in RESOURCES}


def job_usage(
    share: int | None, gpu_totals: Sequence[int], cpus: Number | None = None
) -> Resources:
    """What a placed job counts against its queue (the module's counting rule).

    ``share`` is the job's per-GPU ``gpu_memory`` (None: exclusive);
    ``gpu_totals`` is the ``memory_total`` of each GPU it holds (empty for a
    CPU-only job). A share never counts more than one GPU-equivalent per GPU.
    """
    gpus: Quantity = 0
    memory = 0
    for gpu_total in gpu_totals:
        if share is None:
            gpus, memory = gpus + 1, memory + gpu_total
        else:
            gpus += Fraction(share, gpu_total) if 0 < share < gpu_total else 1
            memory += share
    return Resources(exact(gpus), memory, exact(cpus or 0))


def mig_usage(compute: int, slices: int, memory: int, cpus: Number | None = None) -> Resources:
    """What a job holding one MIG device counts (the module's counting rule): ``compute``
    of its GPU's ``slices`` compute slices as GPU-equivalents, and the device's
    ``memory`` bytes. A pending MIG job is priced the same way, on the largest device
    of its profile (``memory``), so the charge once placed never exceeds it."""
    return Resources(exact(Fraction(compute, slices)), memory, exact(cpus or 0))


def pending_usage(
    gpus: int, share: int | None, eligible_totals: Iterable[int], cpus: Number | None = None
) -> Resources:
    """What admission charges a pending job: an upper bound of its ``job_usage``.

    ``eligible_totals`` are the ``memory_total`` sizes of the GPUs the job
    could run on (model matches; at least ``share`` for a shared job). A
    shared job is priced on the smallest of them, an exclusive one on the
    largest. With none eligible (the job cannot run anywhere now) each GPU
    counts as one whole GPU-equivalent, and an exclusive job's memory as 0.
    """
    sizes = sorted(t for t in eligible_totals if t > 0 and (share is None or t >= share))
    if gpus == 0:
        return job_usage(share, (), cpus)
    if not sizes:
        memory = 0 if share is None else gpus * share
        return Resources(gpus, memory, exact(cpus or 0))
    reference = sizes[-1] if share is None else sizes[0]
    return job_usage(share, [reference] * gpus, cpus)


def request_usage(
    gpus: int,
    nodes: int,
    share: int | None,
    eligible_totals: Iterable[int],
    cpus: Number | None = None,
) -> Resources:
    """``pending_usage`` of a job of ``nodes`` parts, each ``gpus`` GPUs and ``cpus`` cores
    (a gang counts every part; ``nodes`` is 1 for any other job)."""
    return pending_usage(
        gpus * nodes, share, eligible_totals, None if cpus is None else cpus * nodes
    )


def capacity_of(gpu_totals: Iterable[int], cpus: Number = 0) -> Resources:
    """Cluster capacity: one GPU-equivalent and its memory per GPU, plus ``cpus`` cores.

    Pass the GPUs jobs may use (healthy, on available nodes). ``cpus`` is 0
    when unknown; fair share then ignores CPUs.
    """
    sizes = list(gpu_totals)
    return Resources(len(sizes), sum(sizes), exact(cpus))


# ── wording ────────────────────────────────────────────────────────────────


def number(value: Quantity) -> str:
    """``16``, ``0.25``, ``0.42``: whole numbers bare, others to 2 decimals."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


_UNITS: dict[Resource, tuple[str, str]] = {"gpus": ("GPU", "GPUs"), "cpus": ("CPU", "CPUs")}


def bare(resource: Resource, value: Quantity) -> str:
    """The number alone, in the resource's display unit (GPU memory in GiB, suffixed)."""
    if resource == "gpu_memory":
        return number(Fraction(value, GiB)) + "GiB"
    return number(value)


def amount(resource: Resource, value: Quantity) -> str:
    """``1 GPU``, ``12 GPUs``, ``20GiB GPU memory``, ``0.5 CPUs``."""
    if resource == "gpu_memory":
        return f"{bare(resource, value)} GPU memory"
    singular, plural = _UNITS[resource]
    return f"{number(value)} {singular if value == 1 else plural}"


def ratio(resource: Resource, used: Quantity, cap: Quantity) -> str:
    """``16/16 GPUs``, ``300GiB/320GiB GPU memory``, ``12/16 CPUs``."""
    if resource == "gpu_memory":
        return f"{bare(resource, used)}/{bare(resource, cap)} GPU memory"
    return f"{number(used)}/{number(cap)} {_UNITS[resource][1]}"
