"""A job's logs: archived attempts, then the live container's, as one stream of chunks.

``LogReader`` iterates them and may be ended from any thread (``close``): a
follow that outlives its token (``services/token_watch.py``) is cut there,
while the reading thread is blocked on the engine.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudock.core.job import Job, JobState
from gpudock.executors.base import ExecutorUnavailable
from gpudock.store import jobs as job_store
from gpudock.store.tokens import Principal

if TYPE_CHECKING:
    from gpudock.services.jobs import JobService

STREAM_END = "[gpudock] stream ended: "
"""The last line of a followed log that the server ended (``STREAM_END + reason``)."""


ARCHIVE_WAIT = 3.0  # seconds a read of an ended attempt waits for its archive
ARCHIVE_POLL = 0.05
FOLLOW_RETRY = 0.2  # seconds between follows of a container that has not started yet


class LogReader(Iterator[bytes]):
    """Chunks of one job's logs; ``close`` ends the iteration from any thread. Idempotent."""

    def __init__(self, service: JobService, job: Job, follow: bool) -> None:
        self._service = service
        self._job = job
        self._follow = follow
        self._live: Any = None  # the engine's stream, while one is read
        self._closed = threading.Event()
        self._chunks = self._all()

    def __next__(self) -> bytes:
        return next(self._chunks)

    def close(self) -> None:
        """Stop: a blocked read returns, nothing more is yielded."""
        self._closed.set()
        live = self._live
        if live is not None and hasattr(live, "close"):
            with contextlib.suppress(Exception):
                live.close()

    def _all(self) -> Iterator[bytes]:
        """Archived logs of earlier attempts, then the live container's (followed if asked)."""
        job, ctx = self._job, self._service.ctx
        archived = sorted(_log_files(ctx.log_dir, job.id), key=_attempt_of)
        live = job.state in (JobState.STARTING, JobState.RUNNING)
        current = ctx.log_dir / f"job-{job.id}" / f"attempt-{job.attempt}.log"
        # an ended attempt whose archive the finisher has not written yet
        unarchived = not live and job.state.terminal and job.container_name and not current.exists()
        headed = len(archived) > 1 or bool((live or unarchived) and archived)
        for path in archived:
            if live and path == current:
                continue
            if headed:
                yield f"--- attempt {_attempt_of(path)} ---\n".encode()
            yield from _read_file(path)
        if not live:
            if unarchived:
                if headed:
                    yield f"--- attempt {job.attempt} ---\n".encode()
                yield from self._unarchived(current)
            return
        if archived:
            yield f"--- attempt {job.attempt} ---\n".encode()
        try:
            if self._follow:
                yield from self._followed(current)
            elif job.container_name:
                yield from self._engine(job.container_name, follow=False)
        except ExecutorUnavailable as exc:
            yield f"[gpudock] cannot read live logs: Docker unreachable: {exc}\n".encode()

    def _followed(self, archive: Path) -> Iterator[bytes]:
        """The live attempt's output, followed until it ends.

        A STARTING job's container may not exist or not have started yet, and the
        engine answers a follow of such a container with nothing at once. So while
        nothing came, the job is read again: still STARTING or RUNNING in the same
        attempt, the follow is tried again (nothing was sent, nothing is repeated);
        ended, its logs are read as an ended attempt's; requeued, there is nothing more.
        """
        job = self._job
        while not self._closed.is_set():
            seen = False
            if job.container_name:
                for chunk in self._engine(job.container_name, follow=True):
                    seen = True
                    yield chunk
            if seen:
                return
            with self._service.ctx.db.read() as session:
                now = job_store.get_job(session, job.id)
            if now is None or now.attempt != job.attempt:
                return
            if now.state.terminal:
                self._job = now
                if now.container_name:
                    yield from self._unarchived(archive)
                return
            if now.state not in (JobState.STARTING, JobState.RUNNING):
                return
            job = now
            self._closed.wait(FOLLOW_RETRY)

    def _engine(self, container: str, follow: bool) -> Iterator[bytes]:
        """The container's output from the engine, until it ends or ``close``."""
        if self._closed.is_set():
            return
        self._live = self._service.ctx.executor.logs(container, follow=follow)
        if self._closed.is_set():  # closed while it was being opened
            self.close()
        try:
            for chunk in self._live:
                if self._closed.is_set():
                    return
                yield chunk
        finally:
            live, self._live = self._live, None
            if hasattr(live, "close"):
                live.close()

    def _unarchived(self, archive: Path) -> Iterator[bytes]:
        """An ended attempt whose archive is still being written (the finisher
        frees GPUs first, then archives): read its container, which is removed
        only after the archive is complete; if it is gone already, or the engine
        refuses it while it is being removed, the archive."""
        assert self._job.container_name is not None
        seen = False
        try:
            for chunk in self._engine(self._job.container_name, follow=False):
                seen = True
                yield chunk
        except ExecutorUnavailable as exc:
            if not seen and archive.exists():  # removed after its archive was complete
                yield from _read_file(archive)
            else:
                yield f"[gpudock] cannot read logs: Docker unreachable: {exc}\n".encode()
            return
        if not seen and self._archived(archive):
            yield from _read_file(archive)

    def _archived(self, archive: Path) -> bool:
        """Whether ``archive`` exists, waiting up to ``ARCHIVE_WAIT`` seconds for the
        finisher to write it: an engine may answer an ended container's logs with nothing
        for a moment (Swarm's service logs do), while the finisher archives them."""
        waited = 0.0
        while not archive.exists():
            if waited >= ARCHIVE_WAIT or self._closed.wait(ARCHIVE_POLL):
                return False
            waited += ARCHIVE_POLL
        return True


def open_logs(service: JobService, job_id: int, principal: Principal, follow: bool) -> LogReader:
    """The reader of ``job_id``'s logs; ``NotFound`` (at once) for a job the caller cannot see."""
    return LogReader(service, service.get(job_id, principal), follow)


def _log_files(log_dir: Path, job_id: int) -> list[Path]:
    folder = log_dir / f"job-{job_id}"
    return list(folder.glob("attempt-*.log")) if folder.is_dir() else []


def _attempt_of(path: Path) -> int:
    try:
        return int(path.stem.removeprefix("attempt-"))
    except ValueError:
        return -1


def _read_file(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(65536):
            yield chunk
