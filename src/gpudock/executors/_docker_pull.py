"""Pull an image with a deadline (docker-py's pull has no timeout of its own)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import docker.errors
import docker.utils

from gpudock.executors._docker_spec import short_pull_error
from gpudock.executors.base import LaunchError

log = logging.getLogger("gpudock.executors.docker")


def explanation(exc: Any) -> str:
    """Docker's own error text for an ``APIError``, else ``str(exc)``."""
    return str(getattr(exc, "explanation", None) or exc)


def pull_image(client: Any, image: str, timeout: float) -> None:
    """Pull ``image`` through ``client``, waiting at most ``timeout`` seconds.

    Raises ``LaunchError("image '…' is not present and could not be pulled: …")``
    if the registry refuses or cannot be reached, or on timeout; a timed-out pull
    continues in a daemon thread and may still land. Connection errors to the
    engine itself propagate unchanged (``OSError``/``DockerException``).
    """
    outcome: list[BaseException | None] = []

    def work() -> None:
        try:
            _pull_blocking(client, image)
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)

    worker = threading.Thread(target=work, name=f"gpudock-pull-{image}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise LaunchError(
            f"image {image!r} is not present and could not be pulled: no result within {timeout:g}s"
        )
    if outcome[0] is not None:
        raise outcome[0]


def _pull_blocking(client: Any, image: str) -> None:
    repository, tag = docker.utils.parse_repository_tag(image)
    prefix = f"image {image!r} is not present and could not be pulled"
    log.info("pulling image %s", image)
    try:
        for message in client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if isinstance(message, dict) and message.get("error"):
                raise LaunchError(f"{prefix}: {short_pull_error(str(message['error']))}")
    except docker.errors.APIError as exc:
        raise LaunchError(f"{prefix}: {short_pull_error(explanation(exc))}") from exc
