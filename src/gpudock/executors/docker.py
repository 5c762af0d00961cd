"""Run job containers on a Docker Engine through docker-py.

::

    launch(request)
      │ container named request.name exists? ──yes──► adopt (ours? start if created)
      no
      ▼
    stage mount sources on this host ──missing, a symlink leaves the allowlist,
      │  (``_docker_mounts``)               or the path changes meanwhile──►
      │                                     LaunchError, nothing created
      ▼
    create, binding the staged paths (unstaged once started or failed)
      │ 404 no such image ──► pull (bounded by pull_timeout) ──► create again
      │ 409 name taken (a racing launch) ──► wait briefly, adopt
      ▼
    start ──fails──► remove the half-made container, then:
      │               "could not select device driver" and gpu_mode=auto and the
      │               GPUs are emulated ──► switch to env mode for good, create again
      │               otherwise ──► LaunchError with Docker's reason, shortened
      ▼
    inspect ──► ContainerStatus

Errors: ``ExecutorUnavailable`` when the engine cannot be reached (retry later),
``LaunchError`` when retrying the same request cannot help.

Threads: one docker-py client (a ``requests`` session over a pooled unix
socket) is shared. Plain calls from a few threads are fine; each
``logs(follow=True)`` holds one pooled connection until its iterator is closed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import requests.exceptions

from gpudock.config import ExecutorConfig, ServerConfig
from gpudock.core.cuda_require import ImageRequirements
from gpudock.core.mounts import Realpath
from gpudock.executors._docker_images import ImageRequirementCache
from gpudock.executors._docker_mounts import Binding, BindSources, staging_root
from gpudock.executors._docker_pull import explanation as _explanation
from gpudock.executors._docker_pull import pull_image
from gpudock.executors._docker_shims import ShimReaper
from gpudock.executors._docker_spec import (
    LABEL_ATTEMPT,
    LABEL_INSTANCE,
    LABEL_JOB,
    NO_GPU_DRIVER_TEXT,
    admin_sources,
    build_create_spec,
    engine_realpath,
    listed_from_summary,
    recheck_sources,
    short_engine_error,
    status_from_attrs,
    stop_timeout,
)
from gpudock.executors._docker_streams import DockerEvents, EngineStream
from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    EngineFault,
    EngineTimeout,
    EventStream,
    ExecOutput,
    ExecSession,
    ExecutorUnavailable,
    ExecutorWithEvents,
    ExecutorWithExec,
    LaunchError,
    LaunchRequest,
    ListedContainer,
)
from gpudock.executors.deadlines import Deadlines
from gpudock.executors.errors import Fault, classify
from gpudock.executors.mount_staging import MountStager

log = logging.getLogger("gpudock.executors.docker")

CLIENT_POOL_SIZE = 16
CLIENT_TIMEOUT_MARGIN = 5.0
"""The client's socket timeout is the longest plain call's deadline plus this: the
deadline answers the caller first, and the socket timeout then frees the thread."""
# A racing create holds the name (409) before its container can be inspected.
_RACE_SETTLE_SECONDS = 10.0
SHIM_SCAN_SECONDS = 10.0  # between two looks for shims the engine forgot

ClientFactory = Callable[[], Any]  # returns a docker.DockerClient
GpuMode = Literal["device-request", "env"]


def deadlines_of(config: ExecutorConfig) -> Deadlines:
    """The engine calls' deadlines that ``config`` sets (``executor.call_timeout`` and
    ``inspect_timeout``; a launch may also pull, for up to ``pull_timeout``)."""
    call = config.call_timeout
    return Deadlines(
        describe=config.inspect_timeout, call=call, launch=config.pull_timeout + 3 * call
    )


def default_client_factory(config: ExecutorConfig) -> ClientFactory:
    """A factory for a client of ``config.docker_url`` (or DOCKER_HOST / the local socket)."""
    timeout = max(config.call_timeout, config.inspect_timeout) + CLIENT_TIMEOUT_MARGIN

    def make() -> Any:
        if config.docker_url:
            return docker.DockerClient(
                base_url=config.docker_url, timeout=timeout, max_pool_size=CLIENT_POOL_SIZE
            )
        return docker.from_env(timeout=timeout, max_pool_size=CLIENT_POOL_SIZE)

    return make


@contextmanager
def _engine_call(what: str, target: str | None = None) -> Iterator[None]:
    """Turn 'cannot reach the engine' errors into ``ExecutorUnavailable``, and a
    call the engine took but did not answer in time into ``EngineTimeout`` about
    ``target``.

    ``APIError`` (the engine answered with an error) passes through for the
    caller to judge; so do ``LaunchError`` and ``ExecutorUnavailable``.
    """
    try:
        yield
    except docker.errors.APIError:
        raise
    except requests.exceptions.ReadTimeout as exc:
        raise EngineTimeout(
            f"the engine did not answer while {what}: {exc}", target=target
        ) from exc
    except (docker.errors.DockerException, OSError) as exc:  # requests errors are OSErrors
        raise ExecutorUnavailable(f"Docker engine unreachable while {what}: {exc}") from exc


class DockerExecutor(ExecutorWithEvents, ExecutorWithExec):
    """The ``Executor`` for one Docker Engine.

    Every container it makes carries the labels ``gpudock.job``,
    ``gpudock.attempt``, ``gpudock.instance`` (this executor's
    ``instance_id``) and ``gpudock.gpus``; ``list_containers`` sees only
    containers with this instance's label. The client is created on first use,
    so constructing an executor never touches the engine (nor the host's mounts).
    Mount sources are staged under ``staging_root(config, home)`` (``stager``
    overrides it, for tests).
    """

    def __init__(
        self,
        config: ExecutorConfig,
        instance_id: str,
        client_factory: ClientFactory | None = None,
        home: Path | None = None,
        stager: MountStager | None = None,
    ) -> None:
        if not instance_id:
            raise ValueError("instance_id must not be empty")
        super().__init__(deadlines_of(config))
        self.config = config
        self.instance_id = instance_id
        self._client_factory = client_factory or default_client_factory(config)
        self._client: Any = None
        self._lock = threading.Lock()
        self._mode: GpuMode = "env" if config.gpu_mode == "env" else "device-request"
        self._images = ImageRequirementCache()
        self._binds = BindSources(config, stager or MountStager(staging_root(config, home)))
        self._reaper = ShimReaper(instance_id)
        self._next_shim_scan = 0.0  # monotonic; 0: at the next chance (start, engine back)

    @property
    def gpu_mode(self) -> GpuMode:
        """How emulated GPUs reach containers now; ``auto`` starts as device-request.

        Real (non-emulated) GPUs always use device requests unless the config says ``env``.
        """
        return self._mode

    def _docker(self) -> Any:
        with self._lock:
            if self._client is None:
                with _engine_call("connecting"):
                    self._client = self._client_factory()
            return self._client

    def close(self) -> None:
        """Close the client's connections; a later call makes a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # ----------------------------------------------------------------- queries

    def _ping(self) -> None:
        """Return if the engine answers ``/_ping``; raise ``ExecutorUnavailable`` if not."""
        client = self._docker()
        try:
            with _engine_call("pinging"):
                client.ping()
        except docker.errors.APIError as exc:
            self._next_shim_scan = 0.0  # the engine may restart: look for its leftovers then
            raise ExecutorUnavailable(f"Docker engine unhealthy: {_explanation(exc)}") from exc
        except ExecutorUnavailable:
            self._next_shim_scan = 0.0
            raise

    @classmethod
    def create(cls, config: ServerConfig, instance_id: str, home: Path) -> DockerExecutor:
        """The ``docker`` backend (``executors/registry.py``): this host's engine."""
        return cls(config.executor, instance_id, home=home)

    def engine_info(self) -> dict[str, Any]:
        """``docker info`` of the engine (its host's CPUs and memory, ...)."""
        client = self._docker()
        with self._api_errors_unavailable("reading the engine's info"):
            info: dict[str, Any] = client.info()
        return info

    def _events(self) -> EventStream:
        """Start/die/oom/destroy events of this instance's containers (see base class)."""
        client = self._docker()
        label = f"{LABEL_INSTANCE}={self.instance_id}"
        filters = {"type": "container", "label": label, "event": ["start", "die", "oom", "destroy"]}
        with self._api_errors_unavailable("subscribing to events"):
            return DockerEvents(client.api.events(decode=True, filters=filters))

    def _inspect(self, name_or_id: str) -> ContainerStatus | None:
        """The container's status, or None if it does not exist. Never raises ``LaunchError``."""
        attrs = self._inspect_attrs(self._docker(), name_or_id)
        return None if attrs is None else status_from_attrs(attrs)

    def image_requirements(self, image: str) -> tuple[bool, ImageRequirements | None]:
        """Whether the engine has ``image``, and its ``NVIDIA_REQUIRE_*`` (None: none),
        parsed once per image id (``_docker_images.py``), within ``deadlines.describe``.
        ``ValueError`` for one that does not parse; ``ExecutorUnavailable`` when the
        engine does not answer; ``EngineTimeout`` when it answers too late."""
        return self._calls.run(
            f"image:{image}",
            f"inspecting image {image}",
            self.deadlines.describe,
            lambda: self._image_requirements(image),
        )

    def _image_requirements(self, image: str) -> tuple[bool, ImageRequirements | None]:
        client = self._docker()
        with self._api_errors_unavailable("inspecting an image"):
            return self._images.lookup(client.api, image)

    def _list(self) -> list[ListedContainer]:
        """All containers labelled with this instance id, in any state (``docker ps -a``)."""
        client = self._docker()
        label = f"{LABEL_INSTANCE}={self.instance_id}"
        with self._api_errors_unavailable("listing containers"):
            summaries = client.api.containers(all=True, filters={"label": label})
        return [listed_from_summary(summary) for summary in summaries]

    def _logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        """Stdout and stderr chunks, interleaved, without timestamps.

        Yields nothing if the container does not exist. With ``follow`` it
        blocks until the container exits; ``close()`` on the result, from any
        thread, ends it early (a blocked read returns).
        """
        client = self._docker()
        with self._api_errors_unavailable("reading logs", name_or_id):
            try:
                stream = client.api.logs(
                    name_or_id, stdout=True, stderr=True, stream=True, follow=follow
                )
            except docker.errors.NotFound:
                return EngineStream(None)
        return EngineStream(stream)

    def _exec(self, name_or_id: str, command: list[str]) -> ExecOutput:
        """Run ``command`` in the running container (``_docker_exec.py``)."""
        from gpudock.executors._docker_exec import start_exec

        client = self._docker()
        with self._api_errors_unavailable("starting a command in a container", name_or_id):
            return start_exec(client, name_or_id, command)

    def _exec_tty(self, name_or_id: str, command: list[str], rows: int, cols: int) -> ExecSession:
        """Run ``command`` on a TTY, stdin open (``_docker_tty.py``)."""
        from gpudock.executors._docker_tty import start_exec_tty

        client = self._docker()
        with self._api_errors_unavailable("starting a command in a container", name_or_id):
            return start_exec_tty(client, name_or_id, command, rows, cols)

    def mount_problem(self) -> str | None:
        """Why mounts are not staged on this host, or None (``_docker_mounts``)."""
        return self._binds.problem()

    def release_stale_mounts(self) -> int:
        """Unmount and remove staging a crashed server left (``MountStager.sweep``)."""
        return self._binds.sweep()

    def reap_leftovers(self) -> int:
        """Kill the containerd shims Docker forgot that are this instance's and run nothing
        (``_docker_shims.py``); how many. A local engine only; a scan at most every
        ``SHIM_SCAN_SECONDS``, and at the first call after the engine stopped answering."""
        now = time.monotonic()
        if self._binds.socket_path() is None or now < self._next_shim_scan:
            return 0
        self._next_shim_scan = now + SHIM_SCAN_SECONDS
        try:
            return self._reaper.reap(lambda container: self.inspect(container) is not None)
        except ExecutorUnavailable:
            self._next_shim_scan = 0.0
            return 0

    # ---------------------------------------------------------------- commands

    def _stop(self, name_or_id: str, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_seconds`` (rounded up to whole seconds).

        Returns once the container has stopped. No error if it is absent or not running.
        """
        client = self._docker()
        with self._api_errors_unavailable("stopping a container", name_or_id):
            try:
                client.api.stop(name_or_id, timeout=stop_timeout(grace_seconds))
            except docker.errors.NotFound:
                return

    def _remove(self, name_or_id: str) -> None:
        """Force-remove the container and its anonymous volumes. No error if absent."""
        client = self._docker()
        with self._api_errors_unavailable("removing a container", name_or_id):
            try:
                client.api.remove_container(name_or_id, v=True, force=True)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code == 409 and "already in progress" in _explanation(exc):
                    return
                raise

    def _launch(self, request: LaunchRequest) -> ContainerStatus:
        """Create and start ``request.name``, idempotently (see ``Executor.launch``).

        An existing container of that name is adopted only if its labels say it
        is this instance's container for this job and attempt; any other owner
        is a ``LaunchError``, and that container is left alone.
        """
        client = self._docker()
        try:
            with _engine_call(f"launching {request.name}", request.name):
                deadline = time.monotonic() + _RACE_SETTLE_SECONDS
                pause, fresh = 0.02, request.fresh
                while True:  # a fresh name has no container to look for: create at once
                    attrs = None if fresh else self._inspect_attrs(client, request.name)
                    fresh = False  # taken meanwhile (409): looked at next time round
                    if attrs is not None:
                        status = self._adopt(client, attrs, request)
                    else:
                        status = self._create_and_start(client, request)
                    if status is not None:
                        return status
                    if time.monotonic() + pause > deadline:
                        break
                    time.sleep(pause)  # a racing launch holds the name but is not visible yet
                    pause = min(pause * 2, 0.5)
        except docker.errors.APIError as exc:
            reason = _explanation(exc)
            if classify(reason, exc.status_code) is Fault.ENGINE:
                raise EngineFault(
                    f"the engine failed container {request.name}: {short_engine_error(reason)}"
                ) from exc
            raise LaunchError(
                f"Docker refused container {request.name}: {short_engine_error(reason)}"
            ) from exc
        raise EngineTimeout(
            f"container {request.name}: its name stayed taken by a container that could not "
            f"be inspected for {_RACE_SETTLE_SECONDS:g}s (a racing launch?); try again",
            target=request.name,
        )

    # ---------------------------------------------------------------- internals

    @contextmanager
    def _api_errors_unavailable(self, what: str, target: str | None = None) -> Iterator[None]:
        """Like ``_engine_call``, but an unexpected engine error is also 'unavailable'."""
        try:
            with _engine_call(what, target):
                yield
        except docker.errors.APIError as exc:
            raise ExecutorUnavailable(
                f"Docker engine error while {what}: {_explanation(exc)}"
            ) from exc

    def _inspect_attrs(self, client: Any, name_or_id: str) -> dict[str, Any] | None:
        with self._api_errors_unavailable("inspecting a container", name_or_id):
            try:
                attrs: dict[str, Any] = client.api.inspect_container(name_or_id)
            except docker.errors.NotFound:
                return None
        return attrs

    def _adopt(
        self, client: Any, attrs: dict[str, Any], request: LaunchRequest
    ) -> ContainerStatus | None:
        """Return the existing container's status, starting it if only created.

        None means it vanished meanwhile (the caller creates it afresh).
        """
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        wanted = {
            LABEL_INSTANCE: self.instance_id,
            LABEL_JOB: str(request.job_id),
            LABEL_ATTEMPT: str(request.attempt),
        }
        if any(labels.get(key) != value for key, value in wanted.items()):
            raise LaunchError(
                f"a container named {request.name} already exists but is not this gpudock "
                f"instance's job {request.job_id} attempt {request.attempt}; "
                "it was left untouched"
            )
        status = status_from_attrs(attrs)
        if status.state is not ContainerState.CREATED:
            return status
        mounts = (attrs.get("HostConfig") or {}).get("Mounts") or []
        if any(self._binds.is_staged(str(m.get("Source", ""))) for m in mounts):
            self._discard(client, status.id)  # its staging died with the launch: make anew
            return None
        return self._start(client, status.id, request, mounts)

    def _create_and_start(self, client: Any, request: LaunchRequest) -> ContainerStatus | None:
        """Create and start a new container; None if the name was taken meanwhile.

        Its mounts stay staged from before the create until the start returned.
        """
        with self._binds.bind(request) as binding:
            return self._create_and_start_bound(client, request, binding)

    def _create_and_start_bound(
        self, client: Any, request: LaunchRequest, binding: Binding
    ) -> ContainerStatus | None:
        spec = build_create_spec(
            request,
            self.config,
            self.instance_id,
            device_request=self._device_request(request),
            realpath=self._realpath(),
            sources=binding.sources,
            unsafe=binding.unsafe,
        )
        host_config = client.api.create_host_config(**spec.host)
        pull_timeout, login = self.config.pull_timeout, request.pull_login
        if request.always_pull:  # a private registry: the owner's access is checked each time
            pull_image(client, request.image, pull_timeout, login, cached=True)
        try:
            try:
                created = client.api.create_container(host_config=host_config, **spec.container)
            except docker.errors.ImageNotFound:
                pull_image(client, request.image, pull_timeout, login)
                created = client.api.create_container(host_config=host_config, **spec.container)
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return None
            raise
        recheck = (spec.host.get("mounts") or []) if binding.sources is None else []
        return self._start(client, created["Id"], request, recheck)

    def _realpath(self) -> Realpath:
        return engine_realpath(self.config.docker_url, os.environ.get("DOCKER_HOST"))

    def _start(
        self, client: Any, container_id: str, request: LaunchRequest, mounts: list[Any]
    ) -> ContainerStatus | None:
        """Start a created container; on failure remove it and explain or fall back.

        Just before the start, each bind source in ``mounts`` (Docker's
        ``{Source, ReadOnly}``; resolved, not staged, sources only) must still
        resolve to itself inside the allowlist: a pull or a crash may lie
        between create and start.
        """
        admins = admin_sources(request)
        jobs = [m for m in mounts if str(m.get("Source", "")) not in admins]
        try:
            recheck_sources(jobs, self.config.allowed_mounts, self._realpath())
        except LaunchError:
            self._discard(client, container_id)
            raise
        try:
            client.api.start(container_id)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            reason = _explanation(exc)
            removed = self._discard(client, container_id)
            if classify(reason, exc.status_code) is Fault.ENGINE:
                raise EngineFault(
                    f"the engine failed to start container {request.name}: "
                    f"{short_engine_error(reason)}",
                    removed=removed,
                ) from exc
            if NO_GPU_DRIVER_TEXT in reason:
                return self._without_gpu_driver(client, request, reason)
            raise LaunchError(
                f"container {request.name} failed to start: {short_engine_error(reason)}"
            ) from exc
        attrs = self._inspect_attrs(client, container_id)
        return None if attrs is None else status_from_attrs(attrs)

    def _without_gpu_driver(
        self, client: Any, request: LaunchRequest, reason: str
    ) -> ContainerStatus | None:
        """Docker has no NVIDIA driver: fall back to env mode, or explain why not."""
        if self.config.gpu_mode == "auto" and request.gpus_emulated:
            self._switch_to_env_mode()
            return self._create_and_start(client, request)
        if request.gpus_emulated:
            hint = "emulated GPUs need executor.gpu_mode 'auto' or 'env' on this engine"
        else:
            hint = (
                "the NVIDIA container toolkit is missing or not configured for Docker "
                "(install nvidia-container-toolkit and restart dockerd)"
            )
        raise LaunchError(
            f"container {request.name} cannot get GPUs: Docker has no NVIDIA device driver "
            f"({short_engine_error(reason)}); {hint}"
        )

    def _device_request(self, request: LaunchRequest) -> bool:
        """Whether ``request``'s GPUs go through a device request (env-only otherwise).

        Only emulated GPUs ever fall back to env mode: real GPUs without a
        device request would reach no devices at all.
        """
        if self.config.gpu_mode == "env":
            return False
        return self._mode == "device-request" or not request.gpus_emulated

    def _switch_to_env_mode(self) -> None:
        with self._lock:
            if self._mode == "env":
                return
            self._mode = "env"
        log.warning(
            "Docker has no NVIDIA device driver; GPUs are emulated, so from now on they reach "
            "containers only through NVIDIA_VISIBLE_DEVICES (gpu_mode auto -> env)"
        )

    def _discard(self, client: Any, container_id: str) -> bool:
        """Remove a half-made container; a failure here must not hide the real error.

        Returns whether it is gone. The removal goes through the engine's API
        (``rm -f``); a containerd shim the engine has forgotten is out of its
        reach (see docs/operations.md, "Failures and restarts").
        """
        try:
            client.api.remove_container(container_id, v=True, force=True)
        except docker.errors.NotFound:
            return True
        except (docker.errors.DockerException, OSError) as exc:
            log.warning("could not remove half-made container %s: %s", container_id[:12], exc)
            return False
        return True
