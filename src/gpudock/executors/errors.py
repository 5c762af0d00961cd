"""Whose fault is a Docker error: the job's, or the engine's?

A launch can fail because of the job (a bad image or reference, a command that
does not exist, a mount Docker refuses) or because of the infrastructure (the
engine restarted under the launch, containerd still holds a task from before a
crash, the socket dropped). The first must spend one of the job's retries, or
fail it; the second must never do either: the job is requeued once the engine
answers again (``runtime.launcher``).

``classify`` decides from Docker's own error text (the ``explanation`` of a
docker-py ``APIError``, or ``str()`` of a connection error). Docker's HTTP
status is no guide: it answers 500 both for "task …: already exists" and for
"Cannot mkdir: /bin/sh is not a directory". So the rules are text patterns,
job patterns first, tested on strings captured from a real dockerd
(``tests/unit/executors/docker_errors.json``). An error that matches neither
list is the job's, as it was before this module existed: an unknown error
spends a retry rather than requeueing forever.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Fault(StrEnum):
    JOB = "job"  # retrying the same spec fails the same way: spend a retry, or fail
    ENGINE = "engine"  # the engine's state, not the job's: requeue, no retry spent


_JOB_PATTERNS = (
    r"unable to start container process: exec: ",  # runc: not found, permission denied...
    r"executable file not found",
    r"exec format error",
    r"no such image",
    r"invalid reference format",
    r"repository name must be",
    r"pull access denied",
    r"manifest unknown",
    r"is not present and could not be pulled",
    r"invalid mount",
    r"invalid volume specification",
    r"bind source path does not exist",
    r"mount path must be absolute",
    r"not a directory",
    r"cannot mkdir",
    r"cannot set both count and deviceids",
    r"could not select device driver",
    r"minimum memory limit",
    r"is not allowed",
)

_ENGINE_PATTERNS = (
    r"\btask [0-9a-f]{12,64}: already exists",  # containerd kept a task across a crash
    r"\bid already in use",  # containerd kept the container of such a start
    r"io\.containerd\.runtime\.v2\.task/\S+: file exists",  # a shim bundle left by a crash
    r"is already in progress",  # "removal of container … is already in progress"
    r"context canceled",
    r"context deadline exceeded",
    r"connection refused",
    r"connection reset",
    r"connection aborted",
    r"remotedisconnected",
    r"broken pipe",
    r"transport is closing",
    r"error while dialing",
    r"ttrpc: closed",
    r"code = unavailable",
    r"containerd\.sock",
    r"daemon is shutting down",
    r"is restarting",
    r"engine unreachable",
)

_JOB_RE = re.compile("|".join(_JOB_PATTERNS), re.IGNORECASE)
_ENGINE_RE = re.compile("|".join(_ENGINE_PATTERNS), re.IGNORECASE)


def classify(message: str, status: int | None = None) -> Fault:
    """The party at fault for a Docker error ``message`` (HTTP ``status`` if the engine answered).

    Job patterns win over engine patterns (a missing bind source is the job's
    even when containerd words it as a shim error). ``status`` 503 is the
    engine's; otherwise the status is not used (see module docstring).
    """
    if _JOB_RE.search(message):
        return Fault.JOB
    if _ENGINE_RE.search(message) or status == 503:
        return Fault.ENGINE
    return Fault.JOB
