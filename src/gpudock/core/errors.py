"""Typed domain errors.

Inner layers raise these; the edges (``api`` and ``cli``) turn them into HTTP
status codes and readable messages. None of them should ever reach a user as a
stack trace.
"""

from __future__ import annotations


class GpudockError(Exception):
    """Base class of every expected, user-facing error."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(GpudockError):
    """The request is malformed; ``field`` names the offending input."""

    status_code = 422

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Infeasible(InvalidInput):
    """The job can never be placed on the current inventory."""


class NotFound(GpudockError):
    status_code = 404


class Forbidden(GpudockError):
    status_code = 403


class Unauthorized(GpudockError):
    status_code = 401


class Conflict(GpudockError):
    """The object changed state concurrently, or the request no longer applies."""

    status_code = 409


class TooManyRequests(GpudockError):
    """A per-user limit (such as a queue's ``max_pending_per_user``) is reached.

    Not an outage: the same request succeeds once the user's own jobs move on.
    """

    status_code = 429


class IllegalTransition(Conflict):
    """A job state change that the state machine does not allow."""


class Unavailable(GpudockError):
    """A dependency (the database) is down for now; the same request may succeed later.

    The API answers 503 with ``Retry-After: retry_after`` seconds.
    """

    status_code = 503

    def __init__(self, message: str, retry_after: int = 2) -> None:
        super().__init__(message)
        self.retry_after = retry_after
