"""Can a job *ever* be admitted to its queue? The quota half of the submit-time check.

Pure. ``never_admitted`` asks admission's own rules (``QuotaLedger.check``,
``UserLimits.refuse``) in the most favourable state there is: every queue
idle, the user holding nothing in the queue, every registered GPU counted in
the capacity. A job refused even then would wait for ever, so the submit
refuses it (422 ``Infeasible``, ``services/admissible.py``); the node half
of the question is ``scheduler/feasibility.py``. With no queue declared,
queue names are labels and nothing here refuses anything.

Messages name the bound (the submit puts ``job can never be scheduled:``
before them)::

    queue 'nosuchq' does not exist (declared queues: default, nlp, vision)
    needs 7 GPUs but queue vision's limit is 6 GPUs
    needs 3 GPUs but queue nlp may not borrow and its guarantee is 2 GPUs
    needs 12 GPUs but queue vision can have at most 10 GPUs: its guarantee of 2 GPUs
        and 8 GPUs cohort research and the cluster can lend
    needs 6 GPUs but queue vision's max_running_gpus_per_user is 4
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudock.queue.config import QueuesConfig
from gpudock.queue.model import QueueSet
from gpudock.queue.quota import QuotaLedger, lendable_to
from gpudock.queue.resources import Resources, amount, number
from gpudock.queue.user_limits import UserLimits


@dataclass(frozen=True, slots=True)
class NeverAdmitted:
    """Why a job can never be admitted; ``field`` names the request field to blame."""

    message: str
    field: str


def never_admitted(
    config: QueuesConfig, queue: str, user: str, request: Resources, capacity: Resources
) -> NeverAdmitted | None:
    """Why a job of ``user`` asking ``request`` can never be admitted into ``queue``, or None.

    ``request`` is priced as admission prices a pending job (``pending_usage``
    over the GPUs it could run on; a gang counts every node's part);
    ``capacity`` is ``capacity_of`` every registered GPU. None when no queue is
    declared, or when the idle cluster would admit the job.
    """
    if not config.queues:
        return None
    queues = QueueSet.from_config(config)
    target = queues.get(queue)
    if not target.declared:
        names = ", ".join(sorted(queues.queues))
        return NeverAdmitted(f"queue {queue!r} does not exist (declared queues: {names})", "queue")
    ledger = QuotaLedger(queues, capacity)  # nobody uses anything: the best case
    verdict = ledger.check(queue, request)
    if not verdict.admitted and verdict.resource is not None:
        resource, needs = verdict.resource, amount(verdict.resource, request.get(verdict.resource))
        bound = amount(resource, target.guarantee.get(resource))
        if verdict.refusal == "limit":
            limit = target.limit.get(resource)
            assert limit is not None
            why = f"queue {queue}'s limit is {amount(resource, limit)}"
        elif verdict.refusal == "guarantee":
            why = f"queue {queue} may not borrow and its guarantee is {bound}"
        else:
            lent = lendable_to(target, resource, Resources(), ledger.balance(queue))
            most = amount(resource, target.guarantee.get(resource) + lent)
            lender = (
                "the cluster"
                if target.cohort is None
                else f"cohort {target.cohort} and the cluster"
            )
            why = (
                f"queue {queue} can have at most {most}: its guarantee of {bound} "
                f"and {amount(resource, lent)} {lender} can lend"
            )
        return NeverAdmitted(f"needs {needs} but {why}", resource)
    users = UserLimits.of(config, dict)
    if users is not None and users.refuse(queue, user, request.gpus) is not None:
        cap = users.limit(queue)
        assert cap is not None
        return NeverAdmitted(
            f"needs {amount('gpus', request.gpus)} but queue {queue}'s "
            f"max_running_gpus_per_user is {number(cap)}",
            "gpus",
        )
    return None
