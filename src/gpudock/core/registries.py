"""Private registries: which registry an image is pulled from, and with whose login.

A login is a registry's ``username`` and password. Two kinds exist:

- the **server's**, in the server config (``executor.registries``), each
  password read from a file at load: it pulls for every user;
- a **user's own**, stored with ``gpudock registry login`` (encrypted in the
  database): it pulls only that user's jobs.

At launch the image's registry (``registry_of``) picks the login: the job
owner's own first, else the server's, never another user's. A password is a
``SecretStr`` from the moment it is read: it is revealed once, in
``RegistryLogin.auth_config`` for docker-py, and never reaches a repr, a log,
an event or an API answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator

from gpudock.core.image_ref import REGISTRY_PATTERN

DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
MAX_REGISTRY_LENGTH = 255
_REGISTRY = re.compile(REGISTRY_PATTERN)


def check_registry(value: str) -> str:
    """``value`` as a registry name: lowercase, Docker Hub's aliases as ``docker.io``.

    A registry is a host as an image reference names it (``host.domain[:port]``,
    ``host:port``, ``localhost[:port]``, ``[ipv6][:port]``): no scheme, no path.
    Raises ``ValueError`` with one line saying what is wrong.
    """
    if not value:
        raise ValueError("registry must not be empty")
    if len(value) > MAX_REGISTRY_LENGTH:
        raise ValueError(f"registry is {len(value)} characters; at most {MAX_REGISTRY_LENGTH}")
    scheme, sep, _ = value.partition("://")
    if sep:
        raise ValueError(f"registry {value!r} must be host[:port], without '{scheme}://'")
    if "/" in value:
        raise ValueError(f"registry {value!r} must be host[:port], without a path")
    if not _REGISTRY.fullmatch(value):
        raise ValueError(
            f"registry {value!r} is not a host[:port] as images name it "
            "(a host with a dot or a port, or localhost; e.g. registry.example.com:5000)"
        )
    name = value.lower()
    return DOCKER_HUB if name in _HUB_ALIASES else name


def registry_of(image: str) -> str:
    """The registry ``image`` is pulled from, by Docker's rule: ``docker.io`` unless
    the first component is a host (it has a dot or a port, or is ``localhost``)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        name = first.lower()
        return DOCKER_HUB if name in _HUB_ALIASES else name
    return DOCKER_HUB


@dataclass(frozen=True, slots=True)
class RegistryLogin:
    """The login one pull uses. ``owner`` says whose it is, for failure reasons:
    ``"user alice"`` or ``"the server config"``. Its repr hides the password."""

    registry: str
    username: str
    owner: str
    password: SecretStr = field(repr=False)

    def auth_config(self) -> dict[str, str]:
        """docker-py's ``auth_config``: the one place the password is revealed."""
        return {
            "username": self.username,
            "password": self.password.get_secret_value(),
            "serveraddress": self.registry,
        }


class ConfiguredLogin(BaseModel):
    """A server config login (``executor.registries.HOST``): the password lives in
    ``password_file`` (never inline), read when the config loads; a trailing
    newline is dropped. An unreadable or empty file refuses the config."""

    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=255)
    password_file: str = Field(min_length=1, description="a file holding the password")
    _password: SecretStr = PrivateAttr(default=SecretStr(""))

    @model_validator(mode="after")
    def _read_password(self) -> Self:
        path = Path(self.password_file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read password_file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"password_file {path} is not UTF-8 text") from None
        password = text.rstrip("\r\n")
        if not password:
            raise ValueError(f"password_file {path} is empty")
        self._password = SecretStr(password)
        return self

    def login(self, registry: str) -> RegistryLogin:
        return RegistryLogin(registry, self.username, "the server config", self._password)


def check_registries(value: dict[str, ConfiguredLogin]) -> dict[str, ConfiguredLogin]:
    """The config's logins keyed by normalised registry; ``ValueError`` for a bad or
    repeated name (``index.docker.io`` and ``docker.io`` are one registry)."""
    result: dict[str, ConfiguredLogin] = {}
    for key, login in value.items():
        name = check_registry(key)
        if name in result:
            raise ValueError(f"registry {key!r} is given twice (as {name})")
        result[name] = login
    return result
