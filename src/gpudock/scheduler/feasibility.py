"""Can a job *ever* run on these nodes? Asked at submit time (HTTP 422), by the profile.

The question is the one every step asks (``post_filter.py``): do the profile's filters
admit the job on a node as it would be, here with nothing running there
(``post_filter.emptied``). A node some filter rejects as ``UNRESOLVABLE`` ("never on
this node": a label it lacks, a model it has not, too few GPUs or CPUs in all, an old
driver) can never run the job; one rejected as ``UNSCHEDULABLE`` (down, cordoned) may
come back. A job no node could ever run is refused, in the words the filters give its
pending reasons (their own ``explain``), whatever the filters are, built in or new. A
multi-node gang needs ``nodes`` such nodes. With no node registered nothing is refused:
the cluster is still forming.

Where nodes may join later (a Swarm), the server keeps such jobs pending with those
reasons instead (``scheduler.never_fits: pending``): the cycle words the same reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import KeyVerdicts
from gpudock.scheduler.framework import Profile, StatusCode
from gpudock.scheduler.post_filter import emptied
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["Refusal", "blamed", "never_fits"]

LISTED = 3  # the other nodes' rejections a gang's refusal names


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never run: the filters' reasons, one line for humans (``message``),
    and the job field to blame (the declared ``field`` of the first filter that rules out
    a node; None when it declares none)."""

    reasons: tuple[PendingReason, ...]
    field: str | None

    @property
    def message(self) -> str:
        """The reasons' messages, joined: ``needs 16 GPUs; the largest node has 8 (n0)``."""
        return "; ".join(r.message for r in self.reasons)


def never_fits(job: JobRequest, nodes: Sequence[NodeView], profile: Profile) -> Refusal | None:
    """The ``Refusal`` of a job no node of ``nodes`` could ever run (module doc), or None.

    Pure; O(nodes x filters).
    """
    if not nodes:
        return None
    state = CycleState([emptied(view) for view in nodes])
    verdicts = KeyVerdicts(job, state, profile)
    rejected = verdicts.rejected()
    never = {n for n, (_, s) in rejected.items() if s.code is StatusCode.UNRESOLVABLE}
    could = len(state.views) - len(never)
    if could >= job.nodes:
        return None
    reasons = verdicts.reasons()
    if job.nodes > 1 and could > 0:
        size = f"{job.gpus} GPU" + ("" if job.gpus == 1 else "s")
        need, total = f"needs {job.nodes} nodes (a gang) that can each take {size}", len(nodes)
        named = sorted(never)
        if named:
            why = "; ".join(rejected[name][1].reason for name in named[:LISTED])
            more = f"; and {len(named) - LISTED} more" if len(named) > LISTED else ""
            gang = PendingReason("gang", f"{need}; {could} of {total} can ({why}{more})")
        else:
            noun = "node" if total == 1 else "nodes"
            gang = PendingReason("gang", f"{need}; the cluster has {total} {noun}")
        reasons = [gang]
    first = min(rejected[name][0] for name in never) if never else None
    field = None if first is None else blamed(profile, first)
    return Refusal(tuple(reasons), field)


def blamed(profile: Profile, position: int) -> str | None:
    """The job field the filter at ``position`` declares it checks (its ``field``)."""
    found = getattr(profile.filters[position], "field", None)
    return found if isinstance(found, str) else None
