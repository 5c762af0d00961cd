"""``gpudock exec``: run a command in a job's running container, as its owner.

Only the job's owner may run commands in it: another user's job is
``NotFound`` (404) as everywhere, and an admin who is not the owner gets
``Forbidden`` (403): seeing a job is not running code inside it. A job that
is not RUNNING is a ``Conflict`` (409). The command starts before the answer
does, so a refusal (no such executable, container gone) is an error answer,
never a half-streamed body. No database transaction is open while it runs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Callable, Iterator

from gpudock.core.errors import Conflict, Forbidden, InvalidInput, Unavailable
from gpudock.core.job import JobState
from gpudock.executors.base import (
    ExecOutput,
    ExecSession,
    ExecutorUnavailable,
    ExecutorWithExec,
    LaunchError,
)
from gpudock.services.jobs import JobService
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.jobs")


class JobExec(JobService):
    def start(self, job_id: int, command: list[str], principal: Principal) -> ExecOutput:
        """The running command's output; raises before anything runs if it cannot."""
        executor, container = self._target(job_id, principal)
        with _refusals(job_id, command):
            output = executor.exec(container, command)
        log.info("exec in job %d by %s: %s", job_id, principal.user, command[0],
                 extra={"job": job_id})  # fmt: skip
        return output

    def start_tty(
        self, job_id: int, command: list[str], principal: Principal, rows: int, cols: int
    ) -> ExecSession:
        """The command started on a TTY (``gpudock exec -it``), under the same rules as
        ``start``; the caller owns the session (see ``ExecSession``)."""
        executor, container = self._target(job_id, principal)
        with _refusals(job_id, command):
            session = executor.exec_tty(container, command, rows, cols)
        log.info("exec -it in job %d by %s: %s", job_id, principal.user, command[0],
                 extra={"job": job_id})  # fmt: skip
        return session

    def _target(self, job_id: int, principal: Principal) -> tuple[ExecutorWithExec, str]:
        """The executor and the container of the caller's own RUNNING job, or the refusal."""
        job = self.get(job_id, principal)
        if job.user != principal.user:
            raise Forbidden(f"only the job's owner ({job.user}) may run commands in job {job_id}")
        if job.state is not JobState.RUNNING or job.container_name is None:
            raise Conflict(f"job {job_id} is {job.state.value}; exec needs a RUNNING job")
        executor = self.ctx.executor
        if not isinstance(executor, ExecutorWithExec):
            raise Conflict("this server's executor cannot run commands in containers")
        return executor, job.container_name


@contextlib.contextmanager
def _refusals(job_id: int, command: list[str]) -> Iterator[None]:
    """The executor's refusals as domain errors: 422 naming the command, or 503."""
    try:
        yield
    except LaunchError as exc:
        why = f"cannot run {command[0]!r} in job {job_id}: {exc}"
        raise InvalidInput(why, "command") from None
    except ExecutorUnavailable as exc:
        raise Unavailable(f"Docker engine unreachable: {exc}") from None


def ndjson(output: ExecOutput, ended: Callable[[], str | None] = lambda: None) -> Iterator[bytes]:
    """The output as NDJSON lines: ``{"stream": "stdout"|"stderr", "data": BASE64}``
    per chunk, then ``{"exit_code": N}`` (null when the engine could not say).

    ``ended`` says why the server cut the stream (``output.interrupt``), e.g.
    ``token revoked``: then ``{"error": "session ended: <why>"}`` comes before an
    ``exit_code`` of null (the command runs on).
    """
    try:
        for stream, data in output:
            line = {"stream": stream, "data": base64.b64encode(data).decode()}
            yield json.dumps(line).encode() + b"\n"
    except ExecutorUnavailable as exc:
        if ended() is None:
            yield json.dumps({"error": str(exc)}).encode() + b"\n"
    finally:
        output.close()
    why = ended()
    if why is not None:
        yield json.dumps({"error": f"session ended: {why}"}).encode() + b"\n"
        yield json.dumps({"exit_code": None}).encode() + b"\n"
        return
    yield json.dumps({"exit_code": output.exit_code}).encode() + b"\n"
