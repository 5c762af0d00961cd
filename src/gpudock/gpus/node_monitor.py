"""The node-side GPU work, behind one interface: watchdog, health events, MPS check.

::

    NodeGpuMonitor(config, sink, gpus)           one per node: in the single-host server's
      │                                          process, or in the node agent on each node
      ├─ watch thread, every watchdog.interval (≤ 0.5 s)
      │    NVML processes per GPU (a MIG GPU's: per MIG device, by instance)
      │      ─► pid → container (processes.py) ─► job (sink)
      │    judge() (watchdog.py) ─► sink.over_limit(offence)   once per job and attempt
      │                         └─► sink.stray(stray)           once per (GPU, pid)
      │    every health.poll_interval: GPUs lost, ECC counters of GPUs without events,
      │    the MPS daemon ─► sink.gpu_fault(fault), sink.sharing(mode, mps)
      └─ event thread: NVML event set (XID, ECC) ─► classify (xid.py) ─► sink.gpu_fault

``NodeSink`` is all a host of the monitor implements: what jobs hold here,
which job a container is, and what to do with what the monitor finds. The
monitor decides nothing about jobs' states; the sink (the server's store, or
the agent's report to the server) does. Without NVML (emulated GPUs, no
driver) only the MPS check runs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pynvml

from gpudock.core.inventory import GpuSharing
from gpudock.gpus.config import GpuNodeConfig
from gpudock.gpus.mps import MpsSetup, mps_daemon_running, resolve_sharing
from gpudock.gpus.nvml import GpuQueryFailed, NvmlUnavailable
from gpudock.gpus.nvml_live import GpuEvent, NvmlLive
from gpudock.gpus.processes import GONE, ContainerOfPid
from gpudock.gpus.watchdog import Assignment, Offence, ProcessSample, Stray, Verdict, judge
from gpudock.gpus.xid import FaultClass, FaultKind, GpuFault, classify_xid, ecc_fault

log = logging.getLogger("gpudock.gpus.monitor")


def is_mig(uuid: str) -> bool:
    """A MIG device's uuid (``MIG-…``): its processes are listed by its parent GPU."""
    return uuid.startswith("MIG-")


class NodeSink(Protocol):
    """What the monitor asks and tells its host. Called from the monitor's threads."""

    def assignments(self) -> Sequence[Assignment]:
        """The jobs that hold GPUs on this node now, with their limits."""
        ...

    def job_of_container(self, container_id: str) -> int | None:
        """The gpudock job a container runs (this installation's), or None."""
        ...

    def over_limit(self, offence: Offence) -> None:
        """Stop the job (SIGKILL after ``watchdog.grace``); it ends FAILED (or retries)."""
        ...

    def stray(self, stray: Stray, killed: bool) -> None:
        """A process of no job on a GPU a job holds (``killed``: per ``kill_strays``)."""
        ...

    def gpu_fault(self, fault: GpuFault) -> None:
        """A classified XID or ECC event, or a lost GPU."""
        ...

    def sharing(self, mode: GpuSharing, mps: MpsSetup | None) -> None:
        """The node's sharing mode, at start and whenever the MPS daemon comes or goes."""
        ...


class NodeGpuMonitor:
    """Start once, stop once; ``watch_once`` and ``poll_once`` run one pass (tests)."""

    def __init__(
        self,
        config: GpuNodeConfig,
        sink: NodeSink,
        gpu_uuids: Sequence[str],
        declared_sharing: str = "auto",
        *,
        nvml: NvmlLive | None = None,
        pids: ContainerOfPid | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.sink = sink
        self.gpu_uuids = list(gpu_uuids)
        self.declared_sharing = declared_sharing
        self.nvml = nvml or NvmlLive()
        self.pids = pids or ContainerOfPid()
        self.clock = clock
        self.watching = False  # NVML is open: the watchdog and health checks run
        self._containers: dict[str, int | None] = {}
        self._instances: dict[str, dict[int, str]] = {}  # GPU -> its MIG devices by instance
        self._offended: set[int] = set()
        self._strays: set[tuple[str, int]] = set()
        self._lost: set[str] = set()
        self._ecc: dict[str, tuple[int, int]] = {}
        self._polled: list[str] = []  # GPUs without NVML events
        self._events: Any = None
        self._mode: tuple[GpuSharing, MpsSetup | None] | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- life cycle ---------------------------------------------------------

    def start(self, watch: bool = True) -> None:
        """Check MPS, open NVML and register for events (done when this returns), then
        start the threads. Without NVML only the MPS check runs, every poll interval.
        ``watch`` False leaves the passes to ``watch_once`` and ``poll_once`` (tests
        that step the monitor); the event thread runs either way."""
        self.check_sharing()
        if self.gpu_uuids:
            try:
                self.nvml.open()
                self.watching = True
            except NvmlUnavailable as err:
                log.warning("GPU watchdog and health events off: %s", err.reason)
        if self.watching:
            if self.config.health.events:
                self._events, self._polled = self.nvml.event_set(self.gpu_uuids)
            else:
                self._polled = list(self.gpu_uuids)
            self._ecc = {u: c for u in self._polled if (c := self._ecc_of(u)) is not None}
            if self._events is not None:
                self._spawn("gpu-events", self._event_loop)
        if watch:
            self._spawn("gpu-watch", self._watch_loop)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._events is not None:
            self.nvml.free(self._events)
        self.nvml.close()
        self.watching = False

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"gpudock-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- the watchdog -------------------------------------------------------

    def watch_once(self) -> Verdict:
        """One watchdog pass: sample, attribute, judge, report. Returns the verdict."""
        assignments = self.sink.assignments()
        live = {a.job_id for a in assignments}
        self._offended &= live  # a job that left may offend again on its next attempt
        held = {u for a in assignments for u in a.gpu_uuids if not is_mig(u)}
        samples = self._samples(held | set(self.gpu_uuids))
        verdict = judge(samples, assignments)
        for offence in verdict.offences:
            if offence.job_id not in self._offended:
                log.warning("job %s: %s", offence.job_id, offence.reason)
                self.sink.over_limit(offence)
                self._offended.add(offence.job_id)  # only once the sink took it
        seen = set()
        for stray in verdict.strays:
            seen.add((stray.gpu_uuid, stray.pid))
            if (stray.gpu_uuid, stray.pid) not in self._strays:
                self.sink.stray(stray, self._kill_stray(stray))
        self._strays = seen
        return verdict

    def _samples(self, uuids: set[str]) -> list[ProcessSample]:
        samples: list[ProcessSample] = []
        for uuid in sorted(uuids):
            try:
                processes = self.nvml.processes(uuid)
            except GpuQueryFailed:
                continue  # a lost GPU is the health check's to report
            for process in processes:
                container = self.pids.lookup(process.pid)
                if container == GONE:
                    continue  # ended since NVML listed it: nothing to attribute
                job = self._job_of(container) if container is not None else None
                used = process.used_memory or 0
                device = self._device_of(uuid, process.gpu_instance)
                samples.append(ProcessSample(device, process.pid, used, container, job))
        self.pids.forget_all_but(s.pid for s in samples)
        return samples

    def _device_of(self, uuid: str, instance: int | None) -> str:
        """Where a process of GPU ``uuid`` runs: its MIG device when it runs in MIG GPU
        instance ``instance`` (NVML lists a MIG-mode GPU's processes with their instance),
        else the GPU. The instances' devices are read once per GPU, again when an
        instance is not known (an admin changed the layout)."""
        if instance is None:
            return uuid
        known = self._instances.get(uuid)
        if known is None or instance not in known:
            known = self._instances[uuid] = self.nvml.mig_instances(uuid)
        return known.get(instance, uuid)

    def _job_of(self, container: str) -> int | None:
        if container not in self._containers:
            self._containers[container] = self.sink.job_of_container(container)
        return self._containers[container]

    def _kill_stray(self, stray: Stray) -> bool:
        if not self.config.watchdog.kill_strays:
            return False
        try:
            os.kill(stray.pid, signal.SIGKILL)
        except OSError as err:
            log.warning("cannot kill stray process %s on %s: %s", stray.pid, stray.gpu_uuid, err)
            return False
        return True

    def _watch_loop(self) -> None:
        next_poll = 0.0
        failing = False
        while not self._stop.is_set():
            started = self.clock()
            try:
                if self.watching:
                    self.watch_once()
                if started >= next_poll:
                    next_poll = started + self.config.health.poll_interval
                    self.poll_once()
            except Exception as exc:  # a pass that failed must not end the watchdog
                if not failing:  # once per streak: the sink's store may be down a while
                    log.warning("GPU monitor pass failed (%s); retrying every pass", exc)
                failing = True
            else:
                if failing:
                    log.warning("GPU monitor passes succeed again")
                failing = False
            self._stop.wait(max(0.0, self.config.watchdog.interval - (self.clock() - started)))

    # ---- health and MPS -----------------------------------------------------

    def poll_once(self) -> None:
        """The MPS check; when NVML is open, lost GPUs and the polled GPUs' ECC counters."""
        self.check_sharing()
        if not self.watching:
            return
        for uuid in self.gpu_uuids:
            problem = self.nvml.alive(uuid)
            if problem is None:
                self._lost.discard(uuid)
            elif uuid not in self._lost:
                lost = GpuFault(uuid, FaultKind.LOST, FaultClass.GPU_RESET, None, problem)
                self.sink.gpu_fault(lost)
                self._lost.add(uuid)  # once the sink took it
        for uuid in self._polled:
            counts = self._ecc_of(uuid)
            before = self._ecc.get(uuid)
            if counts is None or before is None:
                continue
            for kind, now, then in ((True, counts[1], before[1]), (False, counts[0], before[0])):
                if now > then:
                    detail = f"{now - then} new, {now} since the last reset"
                    self.sink.gpu_fault(_with_gpu(ecc_fault(kind, detail), uuid))
            self._ecc[uuid] = counts  # once the sink took what was new

    def _ecc_of(self, uuid: str) -> tuple[int, int] | None:
        try:
            return self.nvml.ecc_errors(uuid)
        except GpuQueryFailed:
            return None

    def check_sharing(self) -> None:
        """Tell the sink the node's sharing mode when it is new or changed."""
        mps = self.config.mps
        running = mps_daemon_running(mps.pipe_dir)
        mode = resolve_sharing(self.declared_sharing, running)
        setup = MpsSetup(mps.pipe_dir, mps.log_dir) if mode is GpuSharing.MPS else None
        if mode is GpuSharing.MPS and not running:
            log.warning("executor.sharing is mps but no MPS daemon answers in %s", mps.pipe_dir)
        if self._mode != (mode, setup):
            self._mode = (mode, setup)
            self.sink.sharing(mode, setup)

    def _event_loop(self) -> None:
        """Wait for events; hand each to the sink, retrying while the sink fails (its
        store may be down), so no event is lost to an outage."""
        while not self._stop.is_set():
            try:
                event = self.nvml.wait(self._events, 500)
            except pynvml.NVMLError as err:
                log.warning("NVML event wait failed (%s); GPU health is polled from now on", err)
                self._polled = list(self.gpu_uuids)
                return
            if event is not None:
                self._deliver(self.fault_of(event))

    def _deliver(self, fault: GpuFault) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self.sink.gpu_fault(fault)
                return
            except Exception as exc:
                log.warning("GPU fault %s not recorded yet (%s); retrying", fault.summary, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)

    def fault_of(self, event: GpuEvent) -> GpuFault:
        """What an NVML event means, by the catalog and the config's overrides."""
        if event.event_type & pynvml.nvmlEventTypeXidCriticalError:
            fault = classify_xid(event.data, self.config.health.xid_classes)
        else:
            uncorrected = bool(event.event_type & pynvml.nvmlEventTypeDoubleBitEccError)
            fault = ecc_fault(uncorrected)
        return _with_gpu(fault, event.gpu_uuid)


def _with_gpu(fault: GpuFault, uuid: str) -> GpuFault:
    return GpuFault(uuid, fault.kind, fault.fault_class, fault.code, fault.detail)
