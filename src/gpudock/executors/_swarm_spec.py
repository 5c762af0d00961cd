"""Pure helpers for the Swarm executor: request → service spec, tasks → status, node → EngineNode.

Nothing here talks to the engine. What the Swarm API cannot express of the
Docker executor's hardening is listed in docs/operations.md ("What Swarm
cannot express"); the spec sets everything it can.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudock.config import ExecutorConfig, SwarmConfig
from gpudock.core.job import member_name
from gpudock.executors._docker_spec import container_env
from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    EngineNode,
    LaunchRequest,
    Member,
)
from gpudock.executors.labels import (
    LABEL_ATTEMPT,
    LABEL_GPUS,
    LABEL_INSTANCE,
    LABEL_JOB,
    parse_engine_time,
)

LABEL_NAME = "gpudock.name"  # the attempt's name; a gang's services share it
LABEL_RANK = "gpudock.rank"
LABEL_NODE = "gpudock.node"  # engine label: gpudock's name for a node
LABEL_MODEL = "gpudock.gpu.model"
LABEL_MEMORY = "gpudock.gpu.memory"
LABEL_NVLINK = "gpudock.gpu.nvlink"
GPU_KIND = "NVIDIA-GPU"
NO_NEW_PRIVILEGES_API = (1, 44)  # the first Engine API whose Privileges has NoNewPrivileges

# Task states (swarmkit): before it runs, while it runs, and after.
BEFORE_RUNNING = frozenset(
    {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting"}
)
ENDED = frozenset({"complete", "failed", "shutdown", "rejected", "orphaned", "remove"})


def members_of(request: LaunchRequest) -> tuple[Member, ...]:
    """The containers of ``request``: a gang's members, or one on ``request.node``."""
    if request.members:
        return request.members
    if request.node is None:
        raise ValueError(f"launch request {request.name} names no node")
    return (Member(0, request.node, request.gpu_uuids),)


def service_name(request: LaunchRequest, member: Member) -> str:
    """Rank ``member``'s service: the attempt's name, or ``<name>-r<rank>`` in a gang."""
    return member_name(request.name, member.rank) if request.members else request.name


def network_name(name: str) -> str:
    """The attachable overlay network of gang attempt ``name``."""
    return f"{name}-net"


def gang_env(request: LaunchRequest, member: Member, master_port: int) -> dict[str, str]:
    """The rendezvous variables of a gang member (empty for a one-node job).

    ``NODE_RANK`` is the member's rank, ``LOCAL_WORLD_SIZE`` its GPUs (one
    process per GPU; 1 when it has none), ``WORLD_SIZE`` every process of the
    gang, ``RANK`` the global rank of the member's first process (a launcher
    such as torchrun sets each process's own), ``MASTER_ADDR`` rank 0's
    service (its DNS name on the gang's network), ``NNODES`` the members.
    """
    if not request.members:
        return {}
    local = max(1, len(member.gpu_uuids))
    first = min(request.members, key=lambda m: m.rank)
    return {
        "NNODES": str(len(request.members)),
        "NODE_RANK": str(member.rank),
        "LOCAL_WORLD_SIZE": str(local),
        "WORLD_SIZE": str(local * len(request.members)),
        "RANK": str(member.rank * local),
        "MASTER_ADDR": service_name(request, first),
        "MASTER_PORT": str(master_port),
    }


def service_labels(request: LaunchRequest, member: Member, instance: str) -> dict[str, str]:
    labels = dict(request.labels)
    labels.update(
        {
            LABEL_JOB: str(request.job_id),
            LABEL_ATTEMPT: str(request.attempt),
            LABEL_INSTANCE: instance,
            LABEL_NAME: request.name,
            LABEL_RANK: str(member.rank),
            LABEL_NODE: member.node,
            LABEL_GPUS: ",".join(member.gpu_uuids),
        }
    )
    return labels


@dataclass(frozen=True, slots=True)
class Hardening:
    """The engine-dependent part of the hardening: whether ``NoNewPrivileges`` is understood."""

    no_new_privileges: bool = True


def service_spec(
    request: LaunchRequest,
    member: Member,
    executor: ExecutorConfig,
    swarm: SwarmConfig,
    instance: str,
    engine_node: str,
    hardening: Hardening = Hardening(),
) -> dict[str, Any]:
    """The ``POST /services/create`` body of ``member``'s service, hardened per ``executor``.

    A ``replicated-job`` run once (restart condition ``none``) on the node
    ``engine_node`` (a ``node.id==`` constraint), its GPUs as
    ``NVIDIA_VISIBLE_DEVICES`` (``void`` for none) for the node's default
    ``nvidia`` runtime, the gpudock labels on the service and its container,
    the limits (CPU, memory, pids) and every hardening option Swarm's API
    has: capabilities dropped, init, read-only root, the user, no new
    privileges (when the engine understands it), the json-file log rotation.
    ``shm_size`` becomes a tmpfs on ``/dev/shm``; a gang's services join its
    overlay network with ``dnsrr`` endpoints.
    """
    single = LaunchRequest(**{**_fields(request), "gpu_uuids": member.gpu_uuids, "members": ()})
    env = {
        **container_env(single, executor.driver_capabilities),
        "GPUDOCK_INSTANCE": instance,
        "GPUDOCK_ATTEMPT": str(request.attempt),
        **gang_env(request, member, swarm.master_port),
    }
    labels = service_labels(request, member, instance)
    container: dict[str, Any] = {
        "Image": request.image,
        "Env": [f"{k}={v}" for k, v in env.items()],
        "Labels": labels,
        "Init": executor.init,
        "ReadOnly": executor.read_only_rootfs,
        "StopGracePeriod": int(executor.stop_grace * 1e9),
        "Hostname": service_name(request, member),
    }
    if request.command is not None:
        container["Args"] = list(request.command)
    if executor.user is not None:
        container["User"] = executor.user
    if executor.cap_drop_all:
        container["CapabilityDrop"] = ["ALL"]
    if executor.cap_add:
        container["CapabilityAdd"] = list(executor.cap_add)
    if executor.no_new_privileges and hardening.no_new_privileges:
        container["Privileges"] = {"NoNewPrivileges": True}
    if request.shm_size is not None:
        container["Mounts"] = [
            {"Type": "tmpfs", "Target": "/dev/shm", "TmpfsOptions": {"SizeBytes": request.shm_size}}
        ]
    template: dict[str, Any] = {
        "ContainerSpec": container,
        "Resources": {"Limits": _limits(request, executor)},
        "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
        "Placement": {"Constraints": [f"node.id=={engine_node}"]},
        "LogDriver": {
            "Name": "json-file",
            "Options": {
                "max-size": str(executor.log_max_size),
                "max-file": str(executor.log_max_files),
            },
        },
    }
    spec: dict[str, Any] = {
        "Name": service_name(request, member),
        "Labels": labels,
        "TaskTemplate": template,
        "Mode": {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
    }
    if request.members:
        template["Networks"] = [{"Target": network_name(request.name)}]
        spec["EndpointSpec"] = {"Mode": "dnsrr"}
    return spec


def _limits(request: LaunchRequest, executor: ExecutorConfig) -> dict[str, int]:
    memory = request.memory if request.memory is not None else executor.default_memory
    cpus = request.cpus if request.cpus is not None else executor.default_cpus
    limits = {"Pids": executor.pids_limit}
    if memory is not None:
        limits["MemoryBytes"] = memory
    if cpus is not None:
        limits["NanoCPUs"] = round(cpus * 1e9)
    return limits


def _fields(request: LaunchRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}


def api_at_least(version: str, wanted: tuple[int, int]) -> bool:
    """``version`` (``"1.41"``) is ``wanted`` or newer; False when unparsable."""
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= wanted


# ------------------------------------------------------------------ tasks → status


def latest_task(tasks: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest task of one service (a job service has one; a rerun would add one)."""
    if not tasks:
        return None
    return max(tasks, key=lambda t: (t.get("Version", {}).get("Index", 0), t.get("CreatedAt", "")))


def task_state(task: Mapping[str, Any]) -> str:
    return str((task.get("Status") or {}).get("State", "unknown"))


def task_message(task: Mapping[str, Any]) -> str:
    status = task.get("Status") or {}
    return str(status.get("Err") or status.get("Message") or task_state(task))


def member_status(task: Mapping[str, Any] | None) -> tuple[ContainerState, int | None, str | None]:
    """One task as a container state, exit code (once ended) and error (once failed)."""
    if task is None:
        return ContainerState.DEAD, None, "its task is gone"
    state = task_state(task)
    container = (task.get("Status") or {}).get("ContainerStatus") or {}
    if state in BEFORE_RUNNING:
        return ContainerState.CREATED, None, None
    if state == "running":
        return ContainerState.RUNNING, None, None
    code = container.get("ExitCode")
    if state == "complete":
        return ContainerState.EXITED, int(code or 0), None
    if state == "shutdown" and code is not None and container.get("ContainerID"):
        return ContainerState.EXITED, int(code), None  # stopped: SIGTERM, grace, SIGKILL
    if state == "failed" and code:  # ran and exited non-zero (a start error has no code)
        err = (task.get("Status") or {}).get("Err")
        return ContainerState.EXITED, int(code), err or None
    return ContainerState.DEAD, None, task_message(task)


MemberTask = tuple[int, str, Mapping[str, Any] | None]  # (rank, node, newest task)


def gang_status(
    name: str, members: Sequence[MemberTask], labels: Mapping[str, str]
) -> ContainerStatus:
    """The attempt's status from its members' newest tasks (``(rank, node, task)``).

    Finished as soon as one member ended other than with exit code 0 (its
    code and error, naming rank and node, are the attempt's); finished with
    0 once all did; running once all run (or ran and completed); else
    created (still starting). Its id is ``name``: what the executor finds it by.
    """
    ordered = sorted(members, key=lambda m: m[0])
    states = [(rank, node, task, *member_status(task)) for rank, node, task in ordered]
    gang = len(ordered) > 1
    for rank, node, _task, state, code, error in states:
        if state in (ContainerState.EXITED, ContainerState.DEAD) and code != 0:
            why = None if error is None or _EXIT_ERR.fullmatch(error) else error
            if gang:
                why = f"rank {rank} on node {node}: " + (why or f"exited with code {code}")
            return _status(name, labels, ordered, state, code, why)
    kinds = {state for _r, _n, _t, state, _c, _e in states}
    if kinds == {ContainerState.EXITED}:
        return _status(name, labels, ordered, ContainerState.EXITED, 0, None)
    if ContainerState.CREATED in kinds:
        return _status(name, labels, ordered, ContainerState.CREATED, None, None)
    return _status(name, labels, ordered, ContainerState.RUNNING, None, None)


_EXIT_ERR = re.compile(r"task: non-zero exit \(-?\d+\)")  # Swarm's words for an exit code


def _status(
    name: str,
    labels: Mapping[str, str],
    ordered: Sequence[MemberTask],
    state: ContainerState,
    code: int | None,
    error: str | None,
) -> ContainerStatus:
    finished = state in (ContainerState.EXITED, ContainerState.DEAD)
    stamps = [
        parse_engine_time(((t or {}).get("Status") or {}).get("Timestamp")) for _r, _n, t in ordered
    ]
    known = [s for s in stamps if s is not None]
    return ContainerStatus(
        id=name,  # the executor finds an attempt (a gang's services) by its name
        name=name,
        job_id=_int(labels.get(LABEL_JOB)),
        attempt=_int(labels.get(LABEL_ATTEMPT)),
        state=state,
        exit_code=code if finished else None,
        error=error,
        started_at=min(known) if state is ContainerState.RUNNING and known else None,
        finished_at=max(known) if finished and known else None,
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# ------------------------------------------------------------------ nodes


def engine_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[EngineNode]:
    """Swarm's ``GET /nodes`` as ``EngineNode``s, named (see ``node_names``)."""
    names = node_names(nodes)
    return [engine_node(n, names[str(n["ID"])]) for n in nodes]


def node_names(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{node id: gpudock name}``: the ``gpudock.node`` engine label, else the host name;
    a host name that several unlabelled nodes share becomes ``<host>-<id[:12]>``."""
    hostnames: dict[str, int] = {}
    for node in nodes:
        if not _engine_labels(node).get(LABEL_NODE):
            host = _hostname(node)
            hostnames[host] = hostnames.get(host, 0) + 1
    names = {}
    for node in nodes:
        label, host = _engine_labels(node).get(LABEL_NODE), _hostname(node)
        if label:
            names[str(node["ID"])] = label
        else:
            shared = hostnames.get(host, 0) > 1
            names[str(node["ID"])] = f"{host}-{str(node['ID'])[:12]}" if shared else host
    return names


def engine_node(node: Mapping[str, Any], name: str) -> EngineNode:
    description = node.get("Description") or {}
    resources = description.get("Resources") or {}
    spec = node.get("Spec") or {}
    gpus = tuple(
        str(named["Value"])
        for item in resources.get("GenericResources") or ()
        if (named := item.get("NamedResourceSpec")) and named.get("Kind") == GPU_KIND
    )
    nano = resources.get("NanoCPUs")
    memory = resources.get("MemoryBytes")
    status = node.get("Status") or {}
    return EngineNode(
        engine_id=str(node["ID"]),
        name=name,
        hostname=_hostname(node),
        state=str(status.get("State", "unknown")),
        availability=str(spec.get("Availability", "active")),
        manager=node.get("ManagerStatus") is not None,
        labels=dict(spec.get("Labels") or {}),
        engine_labels=_engine_labels(node),
        gpus=gpus,
        cpus=nano / 1e9 if isinstance(nano, int) and nano > 0 else None,
        memory=memory if isinstance(memory, int) and memory > 0 else None,
        address=status.get("Addr") or None,
    )


def _engine_labels(node: Mapping[str, Any]) -> dict[str, str]:
    engine = (node.get("Description") or {}).get("Engine") or {}
    return {str(k): str(v) for k, v in (engine.get("Labels") or {}).items()}


def _hostname(node: Mapping[str, Any]) -> str:
    return str((node.get("Description") or {}).get("Hostname") or node["ID"])
