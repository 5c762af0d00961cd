"""Run job attempts as Docker Swarm services, on the nodes the scheduler chose.

::

    launch(request)                     one service per member (a gang: one per rank,
      │ services named request.name      on an attachable overlay network, dnsrr)
      │ exist? ──yes──► adopt (ours?)
      no
      ▼
    create each service: replicated-job, restart none, node.id==<node>,
      │ NVIDIA_VISIBLE_DEVICES=<uuids>|void, labels, limits, hardening
      ▼
    wait until every member runs ──rejected "No such image"──► LaunchError
      │                            ──failed to start──────────► LaunchError (the task's error)
      │                            ──node down────────────────► NodeUnavailable (not marked here)
      │                            ──start_timeout────────────► LaunchError
      ▼
    ContainerStatus (one per attempt: a gang's members aggregated, ``gang_status``)

``stop`` sets the service's job to zero completions (Swarm then stops the
task: SIGTERM, ``StopGracePeriod``, SIGKILL, and removes it) while it
follows the service's logs, so the output of the stop grace is kept (in
``<state dir>/swarm-stops``) for ``logs`` and the archive. Removing a job
service does not stop its container (Docker 20.10): ``stop`` never relies on
it. ``remove`` deletes the services and the gang's network; the stopped
containers of ended attempts stay on their nodes until the node agent
removes them (``swarm.keep_exited``).

Services are created with the API's plain create: no registry look-up from
the manager (the Go client's ``QueryRegistry: false``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.auth
import docker.errors

from gpudock.config import ServerConfig
from gpudock.executors._docker_pull import explanation
from gpudock.executors._swarm_engine import SwarmEngine
from gpudock.executors._swarm_spec import (
    BEFORE_RUNNING,
    LABEL_NAME,
    LABEL_RANK,
    gang_status,
    latest_task,
    members_of,
    network_name,
    service_name,
    service_spec,
    task_message,
    task_state,
)
from gpudock.executors._swarm_stop import zero_completions
from gpudock.executors._swarm_watch import ServicePoller
from gpudock.executors.base import (
    ContainerStatus,
    EventStream,
    ExecutorWithEvents,
    LaunchError,
    LaunchRequest,
    ListedContainer,
    Member,
    NodeUnavailable,
)
from gpudock.executors.labels import LABEL_ATTEMPT, LABEL_INSTANCE, LABEL_JOB

log = logging.getLogger("gpudock.executors.swarm")

POLL_SECONDS = (0.01, 0.05)  # while waiting for a task to run: for its first second, then
FAST_POLL_FOR = 1.0  # a task usually runs within a second: polled as a bare client would
ServiceTasks = list[tuple[int, str, dict[str, Any] | None]]  # (rank, node, newest task)


class SwarmExecutor(SwarmEngine, ExecutorWithEvents):
    """The ``Executor`` of the Swarm this host's engine manages (see module docstring)."""

    binds_mounts = False  # paths live on other hosts: the allowlist's checks cannot run there

    @classmethod
    def create(cls, config: ServerConfig, instance_id: str, home: Path) -> SwarmExecutor:
        """The ``swarm`` backend (``executors/registry.py``): the Swarm this host manages."""
        return cls(config.executor, config.swarm, instance_id, home)

    # ---------------------------------------------------------------- queries

    def _services(self, name: str | None = None) -> list[dict[str, Any]]:
        filters: dict[str, Any] = {"label": [f"{LABEL_INSTANCE}={self.instance_id}"]}
        if name is not None:
            filters["label"].append(f"{LABEL_NAME}={name}")
        with self._call("listing services"):
            return list(self._docker().services(filters=filters))

    def _tasks(self, services: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """``{service id: its tasks}`` for ``services``, in one call per 100."""
        ids = [s["ID"] for s in services]
        found: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        api = self._docker()
        with self._call("listing tasks"):
            for start in range(0, len(ids), 100):
                try:
                    tasks = api.tasks(filters={"service": ids[start : start + 100]})
                except docker.errors.NotFound:  # one was removed since it was listed
                    wanted = set(ids[start : start + 100])
                    tasks = [t for t in api.tasks() if t["ServiceID"] in wanted]
                for task in tasks:
                    found.setdefault(task["ServiceID"], []).append(task)
        return found

    def _statuses(
        self,
        services: list[dict[str, Any]],
        tasks: dict[str, list[dict[str, Any]]] | None = None,
    ) -> list[ContainerStatus]:
        """One status per attempt of ``services`` (their ``tasks``, listed if not given)."""
        tasks = self._tasks(services) if tasks is None else tasks
        groups: dict[str, list[dict[str, Any]]] = {}
        for service in services:
            labels = service["Spec"].get("Labels") or {}
            groups.setdefault(labels.get(LABEL_NAME, service["Spec"]["Name"]), []).append(service)
        result = []
        for name, members in groups.items():
            labels = members[0]["Spec"].get("Labels") or {}
            ranked: ServiceTasks = [
                (int((m["Spec"].get("Labels") or {}).get(LABEL_RANK, 0)),
                 str((m["Spec"].get("Labels") or {}).get("gpudock.node", "")),
                 latest_task(tasks.get(m["ID"], [])))  # type: ignore[misc]
                for m in members
            ]  # fmt: skip
            stopped = self._stops.status(name)
            if stopped is not None and all(task is None for _r, _n, task in ranked):
                result.append(stopped)
            else:
                result.append(gang_status(name, ranked, labels))
        return result

    def list_containers(self) -> list[ContainerStatus]:
        """One status per attempt (a gang's services aggregated) of this instance: two
        engine calls in all (services, tasks) within ``deadlines.call``, not one
        description per attempt."""
        return self._calls.run(
            "list", "the listing", self.deadlines.call, lambda: self._statuses(self._services())
        )

    def _list(self) -> list[ListedContainer]:
        """The attempts of this instance, by name (what ``Executor.list_containers`` would
        describe one by one; this backend lists them described, above)."""
        return [
            ListedContainer(s.id, s.name, s.job_id, s.attempt)
            for s in self._statuses(self._services())
        ]

    def _inspect(self, name_or_id: str) -> ContainerStatus | None:
        services = self._services(name_or_id)
        if not services:
            return None
        return self._statuses(services)[0]

    def _events(self) -> EventStream:
        """Attempts whose status changed, found by polling tasks twice a second."""
        self._ping()
        return ServicePoller(lambda: self._statuses(self._services()), interval=0.5)

    # ----------------------------------------------------------------- launch

    def _launch(self, request: LaunchRequest) -> ContainerStatus:
        """Create the attempt's services (or adopt them) and wait until all run.

        A fresh launch lists nothing: it knows its services from the create calls'
        answers. One that finds a member there already (a resumed or racing launch)
        creates the missing ones, then lists them all and checks they are this
        attempt's before adopting them."""
        members = members_of(request)
        services = self._create(request, members)
        if services is None:
            services = self._services(request.name)
            self._check_owner(services, request)
        return self._wait_running(request, members, services)

    def _check_owner(self, services: list[dict[str, Any]], request: LaunchRequest) -> None:
        wanted = {
            LABEL_INSTANCE: self.instance_id,
            LABEL_JOB: str(request.job_id),
            LABEL_ATTEMPT: str(request.attempt),
        }
        for service in services:
            labels = service["Spec"].get("Labels") or {}
            if any(labels.get(k) != v for k, v in wanted.items()):
                raise LaunchError(
                    f"a service named {service['Spec']['Name']} exists but is not this gpudock "
                    f"instance's job {request.job_id} attempt {request.attempt}; left untouched"
                )

    def _create(
        self, request: LaunchRequest, members: tuple[Member, ...]
    ) -> list[dict[str, Any]] | None:
        """Create the members' services: each one made (its id and the spec sent), or None
        when one existed already (409: the caller lists them)."""
        api = self._docker()
        headers = {}
        if request.pull_login is not None:
            headers["X-Registry-Auth"] = docker.auth.encode_header(request.pull_login.auth_config())
        made: list[dict[str, Any]] = []
        existed = False
        with self._call(f"creating the services of {request.name}"):
            if request.members:
                self._network(api, request)
            for member in members:
                spec = service_spec(
                    request, member, self.config, self.swarm, self.instance_id,
                    self._engine_id(member.node), self._hardening,
                )  # fmt: skip
                try:
                    answer = api._result(
                        api._post_json(api._url("/services/create"), data=spec, headers=headers),
                        True,
                    )
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: a racing launch made it: adopted
                        raise LaunchError(
                            f"Swarm refused service {spec['Name']}: {explanation(exc)}"
                        ) from exc
                    existed = True
                    continue
                made.append({"ID": answer["ID"], "Spec": spec})
        return None if existed else made

    def _network(self, api: Any, request: LaunchRequest) -> None:
        name = network_name(request.name)
        if api.networks(names=[name]):
            return
        labels = {LABEL_INSTANCE: self.instance_id, LABEL_JOB: str(request.job_id),
                  LABEL_ATTEMPT: str(request.attempt), LABEL_NAME: request.name}  # fmt: skip
        try:
            api.create_network(name, driver="overlay", attachable=True, labels=labels)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise

    def _wait_running(
        self,
        request: LaunchRequest,
        members: tuple[Member, ...],
        services: list[dict[str, Any]],
    ) -> ContainerStatus:
        """Poll the members' tasks until every one runs (or ended); explain failures before
        running. One tasks call a poll, every 10 ms for the first second, then every 50 ms;
        whether their nodes are up, once a second."""
        began = time.monotonic()
        deadline = began + self.swarm.start_timeout
        names = {service_name(request, m): m for m in members}
        nodes_checked = time.monotonic()
        while True:
            if len(services) < len(names):
                services = self._services(request.name)
            tasks = self._tasks(services)
            by_name = {s["Spec"]["Name"]: latest_task(tasks.get(s["ID"], [])) for s in services}
            for name, member in names.items():
                task = by_name.get(name)
                if task is not None and _failed_to_start(task):
                    raise LaunchError(self._start_error(request, member, task))
            started = len(by_name) == len(names) and None not in by_name.values()
            status = self._statuses(services, tasks)[0] if started else None
            if status is not None and status.state.value != "created":
                return status
            if time.monotonic() > deadline:
                waiting = {n: task_message(t) if t else "no task" for n, t in by_name.items()}
                raise LaunchError(
                    f"service {request.name} did not start within "
                    f"{self.swarm.start_timeout:g}s: {waiting}"
                )
            if time.monotonic() - nodes_checked >= 1.0:
                self._check_nodes_up(request, members, by_name)
                nodes_checked = time.monotonic()
            time.sleep(POLL_SECONDS[time.monotonic() - began >= FAST_POLL_FOR])

    def _start_error(self, request: LaunchRequest, member: Member, task: Any) -> str:
        message = task_message(task)
        if "no such image" in message.lower():
            return f"image {request.image} not found on node {member.node} ({message})"
        return f"service {service_name(request, member)} on node {member.node}: {message}"

    def _check_nodes_up(
        self, request: LaunchRequest, members: tuple[Member, ...], tasks: dict[str, Any]
    ) -> None:
        """A member whose task waits on a node that is down: ``NodeUnavailable``."""
        waiting = [
            m for m in members
            if (t := tasks.get(service_name(request, m))) is None or task_state(t) in BEFORE_RUNNING
        ]  # fmt: skip
        if not waiting:
            return
        states = {n.name: n for n in self.nodes()}
        for member in waiting:
            node = states.get(member.node)
            if node is None or not node.ready:
                state = "gone" if node is None else node.state
                raise NodeUnavailable(
                    f"node {member.node} is {state}; {request.name} starts when it is back",
                    member.node,
                )

    # -------------------------------------------------------------- commands

    def _stop(self, name_or_id: str, grace_seconds: float) -> None:
        """Stop every member (zero completions), keeping their logs; no error if absent.

        Returns once the members on ready nodes ended. A member on a node that
        is not ready cannot be stopped now: its task is told to stop (its node
        acts when it is back; its agent sooner), and nobody waits for it.
        """
        services = self._services(name_or_id)
        if not services:
            return
        api = self._docker()
        ready = {n.name for n in self.nodes() if n.ready}
        here = [s for s in services if _node_of(s) in ready]
        with self._call(f"stopping {name_or_id}"):
            for service in services:
                if service not in here:
                    zero_completions(api, service["ID"])
            if not here:
                return
            final = self._stops.stop(api, name_or_id, here, grace_seconds)
        if final is not None and len(here) == len(services):
            self._stops.remember(name_or_id, final)

    def _remove(self, name_or_id: str) -> None:
        """Remove the attempt's services and network; live tasks are told to stop first
        (without waiting: their nodes stop them; removing a job service alone would not)."""
        services = self._services(name_or_id)
        api = self._docker()
        with self._call(f"removing {name_or_id}"):
            tasks = self._tasks(services)
            for service in services:
                if any(task_state(t) in BEFORE_RUNNING | {"running"} for t in tasks[service["ID"]]):
                    zero_completions(api, service["ID"])
            for service in services:
                with contextlib.suppress(docker.errors.NotFound):
                    api.remove_service(service["ID"])
            for network in api.networks(names=[network_name(name_or_id)]):
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    api.remove_network(network["Id"])
        self._stops.forget(name_or_id)

    def _logs(self, name_or_id: str, follow: bool) -> Iterator[bytes]:
        """The attempt's output: a stopped one's captured log, else its services' logs.

        A gang's ranks come one after the other, each after a ``==> rank N``
        line (following: interleaved as they arrive).
        """
        captured = self._stops.captured(name_or_id)
        if captured is not None:
            yield from captured
            return
        services = sorted(
            self._services(name_or_id),
            key=lambda s: int((s["Spec"].get("Labels") or {}).get(LABEL_RANK, 0)),
        )
        api = self._docker()
        with self._call("reading logs"):
            yield from self._stops.service_logs(api, services, follow)


def _node_of(service: Mapping[str, Any]) -> str:
    return str((service["Spec"].get("Labels") or {}).get("gpudock.node", ""))


def _failed_to_start(task: Mapping[str, Any]) -> bool:
    """Rejected, or failed without an exit code: it never ran (no image, runtime refused)."""
    code = ((task.get("Status") or {}).get("ContainerStatus") or {}).get("ExitCode")
    return task_state(task) in ("rejected", "failed") and not code
