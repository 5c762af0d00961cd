"""Pure helpers for the Docker executor: request → create arguments, inspect → status.

Nothing here talks to the engine, so all of it is unit-testable without Docker.
"""

from __future__ import annotations

import math
import os.path
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import docker.types

from gpudock.config import ExecutorConfig
from gpudock.core.gpu_env import launch_env
from gpudock.core.job import Mount
from gpudock.core.mounts import (
    AllowedMount,
    MountRefused,
    Realpath,
    resolve_mount,
    resolve_within,
    strict_realpath,
)
from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    LaunchError,
    LaunchRequest,
    ListedContainer,
)
from gpudock.executors.labels import LABEL_ATTEMPT as LABEL_ATTEMPT
from gpudock.executors.labels import LABEL_GPUS as LABEL_GPUS
from gpudock.executors.labels import LABEL_INSTANCE as LABEL_INSTANCE
from gpudock.executors.labels import LABEL_JOB as LABEL_JOB
from gpudock.executors.labels import parse_engine_time as parse_engine_time
from gpudock.gpus.mps import mps_env

# dockerd's error when no device driver matches a request (no NVIDIA hook on its PATH).
NO_GPU_DRIVER_TEXT = "could not select device driver"


@dataclass(frozen=True, slots=True)
class CreateSpec:
    """Arguments for ``APIClient.create_container`` and ``create_host_config``."""

    container: dict[str, Any]
    host: dict[str, Any] = field(default_factory=dict)


def build_create_spec(
    request: LaunchRequest,
    config: ExecutorConfig,
    instance_id: str,
    *,
    device_request: bool,
    realpath: Realpath = strict_realpath,
    sources: Sequence[str] | None = None,
    unsafe: str | None = None,
) -> CreateSpec:
    """Everything Docker needs to create ``request``'s container, hardened per ``config``.

    ``device_request`` chooses how GPUs are handed over: an NVIDIA device request
    (dockerd's nvidia driver and the toolkit's hook) or only the
    ``NVIDIA_VISIBLE_DEVICES`` env var (emulated GPUs on a daemon without the
    driver). Mount ``i`` binds ``sources[i]`` (staged by the executor) when
    given; otherwise each mount is resolved with ``realpath`` (on the engine's
    host) and bound resolved (``docker_mounts``). Raises ``LaunchError`` if
    one leaves ``config.allowed_mounts``. Memory+swap equals the memory limit
    unless ``config.allow_swap``; json-file logs rotate at ``config.log_max_size``.
    A shared job on an MPS node (``request.mps``) gets the MPS pipe and log
    directories bound at their host paths and the host's IPC namespace.
    """
    labels = dict(request.labels)
    labels.update(
        {
            LABEL_JOB: str(request.job_id),
            LABEL_ATTEMPT: str(request.attempt),
            LABEL_INSTANCE: instance_id,
            LABEL_GPUS: ",".join(request.gpu_uuids),
        }
    )
    container: dict[str, Any] = {
        "image": request.image,
        "command": list(request.command) if request.command is not None else None,
        "name": request.name,
        "environment": {
            **container_env(request, config.driver_capabilities),
            "GPUDOCK_INSTANCE": instance_id,
        },
        "labels": labels,
        "detach": True,
    }
    if config.user is not None:
        container["user"] = config.user
    memory = request.memory if request.memory is not None else config.default_memory
    cpus = request.cpus if request.cpus is not None else config.default_cpus
    host: dict[str, Any] = {
        "privileged": False,
        "init": config.init,
        "pids_limit": config.pids_limit,
        "read_only": config.read_only_rootfs,
        "security_opt": ["no-new-privileges"] if config.no_new_privileges else None,
        "cap_drop": ["ALL"] if config.cap_drop_all else None,
        "cap_add": list(config.cap_add) or None,
        "mem_limit": memory,
        "memswap_limit": memory if memory is not None and not config.allow_swap else None,
        "nano_cpus": round(cpus * 1e9) if cpus is not None else None,
        "shm_size": request.shm_size,
        "mounts": docker_mounts(request.mounts, config.allowed_mounts, realpath, sources, unsafe)
        or None,
        "log_config": docker.types.LogConfig(
            type="json-file",
            config={"max-size": str(config.log_max_size), "max-file": str(config.log_max_files)},
        ),
    }
    if device_request and request.gpu_uuids:
        host["device_requests"] = [
            docker.types.DeviceRequest(device_ids=list(request.gpu_uuids), capabilities=[["gpu"]])
        ]
    if uses_mps(request):
        assert request.mps is not None
        host["mounts"] = (host["mounts"] or []) + [
            docker.types.Mount(target=path, source=path, type="bind", read_only=False)
            for path in (request.mps.pipe_dir, request.mps.log_dir)
        ]
        host["ipc_mode"] = "host"
    return CreateSpec(container=container, host={k: v for k, v in host.items() if v is not None})


def container_env(request: LaunchRequest, driver_capabilities: str) -> dict[str, str]:
    """The request's env, within the GPU env policy, plus gpudock's own variables (which win).

    ``NVIDIA_DRIVER_CAPABILITIES`` is always set: the job's subset of the
    admin's ``driver_capabilities``, or all of it (``gpudock.core.gpu_env``),
    overriding an image default such as ``all``; other ``NVIDIA_*`` keys
    (except ``NVIDIA_REQUIRE_CUDA``) and ``CUDA_VISIBLE_DEVICES`` are dropped.

    ``NVIDIA_VISIBLE_DEVICES`` is set whenever GPUs are allocated, in both GPU
    modes: with a device request dockerd appends the same value, and setting it
    here also overrides an image default such as ``all``. CPU-only jobs get
    ``NVIDIA_VISIBLE_DEVICES=void``, so an image that defaults to ``all`` on a
    host whose default runtime is NVIDIA's still sees no GPU.
    ``GPUDOCK_GPU_MEMORY_MB`` is the per-GPU share in MiB, for shared jobs only;
    they also get the framework hints (``hint_env``) and, on an MPS node, the
    MPS limits (``gpudock.gpus.mps.mps_env``), which no job env can set.
    """
    env = launch_env(request.env, driver_capabilities)
    env["GPUDOCK_JOB_ID"] = str(request.job_id)
    env["GPUDOCK_GPUS"] = ",".join(request.gpu_uuids)
    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(request.gpu_uuids) if request.gpu_uuids else "void"
    if request.gpu_memory is not None and request.gpu_uuids:
        env["GPUDOCK_GPU_MEMORY_MB"] = str(request.gpu_memory // (1024 * 1024))
        for key, value in hint_env(request.gpu_memory, request.gpu_memory_total).items():
            env.setdefault(key, value)  # a framework setting the job chose itself stays
    if uses_mps(request):
        assert request.mps is not None and request.gpu_memory is not None
        limits = mps_env(
            request.mps, len(request.gpu_uuids), request.gpu_memory, request.gpu_compute
        )
        env.update(limits)
    return env


def admin_sources(request: LaunchRequest) -> set[str]:
    """Bind sources the admin's config put there (the MPS directories), not the job:
    outside the job mounts' allowlist, so ``recheck_sources`` leaves them be."""
    if not uses_mps(request):
        return set()
    assert request.mps is not None
    return {request.mps.pipe_dir, request.mps.log_dir}


def uses_mps(request: LaunchRequest) -> bool:
    """A shared job on a node whose MPS daemon runs: its limits are the driver's."""
    return request.mps is not None and request.gpu_memory is not None and bool(request.gpu_uuids)


def hint_env(limit: int, gpu_total: int | None) -> dict[str, str]:
    """Settings that make the common frameworks stay within a per-GPU ``limit`` of bytes.

    ``GPUDOCK_GPU_MEMORY_LIMIT_BYTES`` (read by ``gpudock.hints.apply_torch_limit``);
    JAX's ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (the share of the GPU's memory, rounded
    down to 3 decimals, when ``gpu_total`` is known); TensorFlow's
    ``TF_FORCE_GPU_ALLOW_GROWTH`` (allocate as needed, not all at once). PyTorch's
    allocator settings (``PYTORCH_CUDA_ALLOC_CONF``) are left to the job.
    """
    env = {"GPUDOCK_GPU_MEMORY_LIMIT_BYTES": str(limit), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    if gpu_total:
        fraction = math.floor(min(limit / gpu_total, 1.0) * 1000) / 1000
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.3f}"
    return env


def docker_mounts(
    mounts: Sequence[Mount],
    allowed: Sequence[AllowedMount],
    realpath: Realpath = strict_realpath,
    sources: Sequence[str] | None = None,
    unsafe: str | None = None,
) -> list[docker.types.Mount]:
    """Bind mounts for Docker: mount ``i`` at ``sources[i]``, or at its *resolved* host path.

    Without ``sources``, ``realpath`` resolves each path on the engine's host
    (``resolve_mount``; ``unsafe`` refuses folders jobs can write). Raises
    ``LaunchError`` naming the mount if one is missing or resolves outside the
    allowlist (a symlink planted after submit, say). Bind mounts (unlike
    ``-v``) fail if the host path is missing instead of creating it.
    """
    result = []
    for index, mount in enumerate(mounts):
        if sources is not None:
            source = sources[index]
        else:
            try:
                source = resolve_mount(mount.host, mount.read_only, allowed, realpath, unsafe)
            except MountRefused as exc:
                where = f"{mount.host}:{mount.container}"
                raise LaunchError(f"mount {where} refused: {exc}") from None
        result.append(
            docker.types.Mount(
                target=os.path.normpath(mount.container),
                source=source,
                type="bind",
                read_only=mount.read_only,
            )
        )
    return result


def recheck_sources(
    mounts: Sequence[Mapping[str, Any]],
    allowed: Sequence[AllowedMount],
    realpath: Realpath = strict_realpath,
) -> None:
    """Raise ``LaunchError`` unless every bind ``Source`` still resolves to itself, allowed.

    ``mounts`` are Docker's mount dicts (``Source``, ``ReadOnly``), as built or
    as inspected. Run just before start: it shrinks the resolve→mount window
    to the start itself, even when a pull or a crash came between.
    """
    for mount in mounts:
        if mount.get("Type", "bind") != "bind":
            continue
        source = str(mount.get("Source", ""))
        try:
            now = resolve_within(source, bool(mount.get("ReadOnly")), allowed, realpath)
        except MountRefused as exc:
            raise LaunchError(f"mount {source} refused before start: {exc}") from None
        if now != source:
            raise LaunchError(
                f"mount {source} refused before start: it now resolves to {now} "
                "(a symlink appeared after it was checked)"
            )


def engine_realpath(docker_url: str | None, docker_host: str | None) -> Realpath:
    """How to resolve a mount source on the engine's host.

    An engine on a unix socket (``docker_url``, else ``DOCKER_HOST``, else the
    default socket) shares this host's filesystem: resolve here. A remote
    engine's paths cannot be resolved from here, so every mount is refused.
    """
    url = docker_url or docker_host or "unix://"
    if url.startswith(("unix://", "/")):
        return strict_realpath

    def remote(path: str) -> str:
        raise OSError(
            f"the engine {url} is not on this host, so gpudock cannot resolve symlinks there "
            "(bind mounts need executor.docker_url on a local unix socket)"
        )

    return remote


def stop_timeout(grace_seconds: float) -> int:
    """Docker's stop timeout is whole seconds; round a fractional grace up."""
    return max(0, math.ceil(grace_seconds))


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def listed_from_summary(summary: Mapping[str, Any]) -> ListedContainer:
    """A ``ListedContainer`` from one entry of ``docker ps -a`` (``GET /containers/json``)."""
    labels = summary.get("Labels") or {}
    names = summary.get("Names") or []
    return ListedContainer(
        id=summary["Id"],
        name=str(names[0]).lstrip("/") if names else summary["Id"],
        job_id=_int_label(labels, LABEL_JOB),
        attempt=_int_label(labels, LABEL_ATTEMPT),
    )


def status_from_attrs(attrs: Mapping[str, Any]) -> ContainerStatus:
    """Build a ``ContainerStatus`` from ``docker inspect`` output.

    An unknown engine state is reported as ``DEAD`` (finished, abnormally);
    ``exit_code`` and ``finished_at`` are None until the container has
    finished, and ``finished_at`` is never before ``started_at``.
    """
    state = attrs.get("State") or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    try:
        container_state = ContainerState(state.get("Status", ""))
    except ValueError:
        container_state = ContainerState.DEAD
    finished = container_state in (ContainerState.EXITED, ContainerState.DEAD)
    started_at = parse_engine_time(state.get("StartedAt"))
    finished_at = parse_engine_time(state.get("FinishedAt")) if finished else None
    if started_at is not None and finished_at is not None and finished_at < started_at:
        finished_at = started_at  # Docker stamps FinishedAt first for very short runs
    return ContainerStatus(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        job_id=_int_label(labels, LABEL_JOB),
        attempt=_int_label(labels, LABEL_ATTEMPT),
        state=container_state,
        exit_code=state.get("ExitCode") if finished else None,
        oom_killed=bool(state.get("OOMKilled", False)),
        error=state.get("Error") or None,
        started_at=started_at,
        finished_at=finished_at,
    )


# Wrappers that containerd/runc put around the reason a container did not start.
_WRAPPER_RE = re.compile(
    r"^(?:failed to create shim task|failed to create shim|failed to create task for container"
    r"|OCI runtime create failed|OCI runtime start failed|runc create failed"
    r"|unable to start container process|error during container init"
    r"|error running hook #\d+|error running hook): "
)


def short_engine_error(text: str) -> str:
    """The useful part of a Docker/containerd/runc error message.

    ``failed to create shim task: OCI runtime create failed: runc create failed:
    unable to start container process: exec: "x": executable file not found in
    $PATH: unknown`` becomes ``exec: "x": executable file not found in $PATH``.
    """
    text = text.strip()
    while (match := _WRAPPER_RE.match(text)) is not None:
        text = text[match.end() :]
    text = text.removesuffix(": unknown").replace("stdout: , stderr: ", "stderr: ")
    return text.strip() or "unknown error"


_REGISTRY_CALL_RE = re.compile(r'^(?:Get|Head|Post) "(?:https?://)?([^/"]+)[^"]*": (.*)$', re.S)
_DIAL_RE = re.compile(r"^dial (?:tcp|udp)(?: \S+)?: (?:lookup \S+(?: on \S+)?: )?(?:connect: )?")


def short_pull_error(text: str) -> str:
    """The useful part of a failed pull, e.g. ``registry localhost:1: connection refused``.

    ``Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io
    on 10.0.0.53:53: no such host`` becomes ``registry registry-1.docker.io: no
    such host``; other messages (``pull access denied…``) pass through.
    """
    text = text.strip()
    match = _REGISTRY_CALL_RE.match(text)
    if match is None:
        return text or "unknown error"
    host, rest = match.groups()
    rest = _DIAL_RE.sub("", rest)
    return f"registry {host}: {rest}"
