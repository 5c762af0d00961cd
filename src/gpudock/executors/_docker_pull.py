"""Pull an image with a deadline (docker-py's pull has no timeout of its own).

A pull goes with the job owner's registry login when there is one
(``core/registries.py``); a refusal for want of a login, or of a good one,
is a ``LaunchError`` naming the registry and whose login it refused, never
the password.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

import docker.errors
import docker.utils

from gpudock.core.registries import RegistryLogin, registry_of
from gpudock.executors._docker_spec import short_pull_error
from gpudock.executors.base import LaunchError

log = logging.getLogger("gpudock.executors.docker")

_AUTH_REFUSED = re.compile(
    r"no basic auth credentials|unauthorized|authentication required|access denied"
    r"|access to the resource is denied|incorrect username or password",
    re.IGNORECASE,
)


def explanation(exc: Any) -> str:
    """Docker's own error text for an ``APIError``, else ``str(exc)``."""
    return str(getattr(exc, "explanation", None) or exc)


def pull_image(
    client: Any,
    image: str,
    timeout: float,
    login: RegistryLogin | None = None,
    cached: bool = False,
) -> None:
    """Pull ``image`` through ``client`` with ``login``, waiting at most ``timeout`` seconds.

    Raises ``LaunchError("image '…' is not present and could not be pulled: …")``
    (``cached``: "image '…' could not be pulled") if the registry refuses or
    cannot be reached, or on timeout; a timed-out pull
    continues in a daemon thread and may still land. Connection errors to the
    engine itself propagate unchanged (``OSError``/``DockerException``).
    """
    outcome: list[BaseException | None] = []

    def work() -> None:
        try:
            _pull_blocking(client, image, login, cached)
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)

    worker = threading.Thread(target=work, name=f"gpudock-pull-{image}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise LaunchError(f"{_prefix(image, cached)}: no result within {timeout:g}s")
    if outcome[0] is not None:
        raise outcome[0]


def _prefix(image: str, cached: bool) -> str:
    return f"image {image!r} " + (
        "could not be pulled" if cached else "is not present and could not be pulled"
    )


def _pull_blocking(client: Any, image: str, login: RegistryLogin | None, cached: bool) -> None:
    repository, tag = docker.utils.parse_repository_tag(image)
    auth = None if login is None else login.auth_config()
    log.info("pulling image %s%s", image, "" if login is None else f" as {login.owner}")
    try:
        stream = client.api.pull(
            repository, tag=tag or "latest", stream=True, decode=True, auth_config=auth
        )
        for message in stream:
            if isinstance(message, dict) and message.get("error"):
                raise LaunchError(pull_failure(image, str(message["error"]), login, cached))
    except docker.errors.APIError as exc:
        raise LaunchError(pull_failure(image, explanation(exc), login, cached)) from None


def pull_failure(image: str, text: str, login: RegistryLogin | None, cached: bool = False) -> str:
    """Why the pull of ``image`` failed, from the engine's ``text``: a refusal for
    want of a login says which registry and what to run; with a login, whose it
    was. The login's password is cut from the text, should the engine echo it."""
    if login is not None:
        text = text.replace(login.password.get_secret_value(), "***")
    short = short_pull_error(text)
    prefix = _prefix(image, cached)
    if not _AUTH_REFUSED.search(text):
        return f"{prefix}: {short}"
    registry = registry_of(image)
    detail = short.removeprefix(f"registry {registry}: ")
    if login is None:
        return (
            f"{prefix}: registry {registry} refused a pull without a login ({detail}); "
            f"store one with: gpudock registry login {registry}"
        )
    return (
        f"{prefix}: registry {registry} refused the login of {login.owner} "
        f"(username {login.username!r}): {detail}"
    )
