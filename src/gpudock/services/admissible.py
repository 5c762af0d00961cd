"""Can the job ever be admitted to its queue? The queue half of the submit-time check.

``JobService`` asks it right after the node half (``_check_feasible``: could
any node ever hold the job?), on submit and on an update of a pending job.
The answer is admission's own rules in the best case there is
(``queue/never.py``, through ``scheduler.admission.never_admitted_on``,
which the simulator asks too); here are only the inputs: the declared
queues, the job as it will be stored, and the registered nodes.
"""

from __future__ import annotations

from gpudock.core.errors import Infeasible
from gpudock.core.job import JobSpec
from gpudock.runtime.context import RuntimeContext
from gpudock.scheduler.admission import never_admitted_on
from gpudock.scheduler.snapshot import JobRequest
from gpudock.store.snapshot import load_nodes


def check_admissible(ctx: RuntimeContext, spec: JobSpec, user: str) -> None:
    """Raise ``Infeasible`` (422) when ``user``'s job ``spec`` can never be admitted.

    ``spec`` is the spec as it will be stored (``job_defaults`` applied). Only
    with declared queues: an unknown queue (``field: "queue"``), a job above
    its queue's limit, or above a queue without borrowing's guarantee, or
    beyond what its cohort and the cluster could ever lend it, or above the
    queue's ``max_running_gpus_per_user`` (``field``: the resource). As the
    node half, a job admissible on this process's cached nodes
    (``RuntimeContext.feasibility_nodes``) is accepted without a read; a
    refusal is decided on nodes read now.
    """
    config = ctx.config.scheduler.queues
    if not config.queues:
        return
    job = JobRequest(
        id=0,
        gpus=spec.gpus,
        submitted_at=0.0,
        gpu_memory=spec.gpu_memory,
        gpu_model=spec.gpu_model,
        queue=spec.queue,
        user=user,
        nodes=spec.nodes,
        cpus=spec.cpus,
    )
    if never_admitted_on(config, job, ctx.feasibility_nodes()) is None:
        return
    with ctx.db.read() as session:
        nodes = load_nodes(session)
    refused = never_admitted_on(config, job, nodes)
    if refused is not None:
        raise Infeasible(f"job can never be scheduled: {refused.message}", field=refused.field)
