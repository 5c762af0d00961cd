"""The bind-mount allowlist: which host paths jobs may mount, and how.

Two checks, one policy::

    submit  check_mount(mount, allowlist)            the path *string*, normalised
    launch  resolve_mount(mount, allowlist)          the path the kernel will bind:
              realpath on the engine's host            every symlink and '..' resolved,
              ──► under an entry that allows the mode  bind *that* path, or refuse

An entry is a host path prefix with a mode: ``ro`` (the default) or ``rw``.
Matching is by whole path components (``/data`` covers ``/data/x``, never
``/database``); when entries nest, the longest match decides the mode. A
mount is read-only unless the job says ``:rw``, and ``:rw`` needs an ``rw``
entry.

Why launch resolves again: Docker follows symlinks in a bind source. A job
that may write under an allowed folder can plant ``link -> /`` there, and a
later job mounting ``<allowed>/link`` would get the host's root. Checking
the string at submit cannot see that; the launch-time check binds the
resolved path and refuses one that has left the allowlist. What remains is
the short window between resolving and Docker's mount (see
``docs/operations.md``, "Mounts").
"""

from __future__ import annotations

import os.path
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

MountMode = Literal["ro", "rw"]


class MountRefused(ValueError):
    """A mount the allowlist does not permit; the message names the path and why."""


class AllowedMount(BaseModel):
    """One allowlist entry: a host path prefix and the most it may be mounted with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    mode: MountMode = "ro"

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"allowed mount {value!r} must be an absolute path")
        return "/" + os.path.normpath(value).lstrip("/")

    def __str__(self) -> str:
        return f"{self.path}:{self.mode}"


def parse_allowlist(value: Any) -> Any:
    """Accept ``["/data", "/scratch:rw"]``, ``{"/data": "ro"}`` or ``[{path, mode}]``.

    A plain path means read-only. Anything else is returned unchanged for
    pydantic to reject with its own message.
    """
    if isinstance(value, dict):
        return [{"path": path, "mode": mode} for path, mode in value.items()]
    if not isinstance(value, list):
        return value
    entries: list[Any] = []
    for item in value:
        if isinstance(item, str):
            path, sep, mode = item.rpartition(":")
            if sep and mode in ("ro", "rw"):
                entries.append({"path": path, "mode": mode})
            elif sep and "/" not in mode:
                raise ValueError(f"allowed mount {item!r}: mode must be 'ro' or 'rw', got {mode!r}")
            else:
                entries.append({"path": item})
        else:
            entries.append(item)
    return entries


def under(path: str, base: str) -> bool:
    """True if ``path`` is ``base`` or below it, by whole components (both normalised)."""
    return base == "/" or path == base or path.startswith(base + "/")


def governing_entry(path: str, allowlist: Iterable[AllowedMount]) -> AllowedMount | None:
    """The longest entry that covers the normalised absolute ``path``, or None."""
    best: AllowedMount | None = None
    for entry in allowlist:
        if under(path, entry.path) and (best is None or len(entry.path) > len(best.path)):
            best = entry
    return best


def check_mount(host: str, read_only: bool, allowlist: Sequence[AllowedMount]) -> None:
    """Submit-time check of the path string; raise ``MountRefused`` naming the entry.

    ``..`` is folded lexically here; symlinks are left to ``resolve_mount``.
    """
    path = os.path.normpath(host)
    if not path.startswith("/") or path.startswith("//"):
        raise MountRefused(f"host path {host} must be absolute")
    entry = governing_entry(path, allowlist)
    if entry is None:
        hint = ", ".join(map(str, allowlist)) if allowlist else "none are allowed on this server"
        raise MountRefused(f"host path {path} is not in the admin allowlist ({hint})")
    if not read_only and entry.mode != "rw":
        raise MountRefused(
            f"host path {path} is under allowlist entry {entry.path}, which is read-only (ro); "
            "mount it read-only (without ':rw'; Docker's --mount form: add ',readonly')"
        )


Realpath = Callable[[str], str]


def strict_realpath(path: str) -> str:
    """``os.path.realpath`` that raises ``OSError`` if the path is missing or loops."""
    return os.path.realpath(path, strict=True)


def resolve_mount(
    host: str,
    read_only: bool,
    allowlist: Sequence[AllowedMount],
    realpath: Realpath = strict_realpath,
) -> str:
    """The host path to bind for ``host``, resolved where the engine runs.

    Resolves every symlink, in the last component and in every intermediate
    one, and ``..`` after them (as the kernel does), then requires the result
    to lie under an entry, itself resolved, whose mode allows ``read_only``.
    Raises ``MountRefused`` if the path is missing, loops, or leaves the
    allowlist. Never creates anything.
    """
    check_mount(host, read_only, allowlist)
    return resolve_within(host, read_only, allowlist, realpath)


def resolve_within(
    host: str,
    read_only: bool,
    allowlist: Sequence[AllowedMount],
    realpath: Realpath = strict_realpath,
) -> str:
    """``resolve_mount`` without the string check: only the resolved path is judged.

    For a path gpudock resolved itself (a bound source, checked again before
    start), which may lie under an entry's target rather than the entry as written.
    """
    try:
        resolved = realpath(host)
    except OSError as exc:
        raise MountRefused(f"host path {host} cannot be resolved: {exc.strerror or exc}") from exc
    real_entries = [
        AllowedMount(path=_entry_realpath(entry.path, realpath), mode=entry.mode)
        for entry in allowlist
    ]
    entry = governing_entry(resolved, real_entries)
    if entry is None:
        raise MountRefused(
            f"host path {host} resolves to {resolved}, outside the admin allowlist "
            "(a symlink leads out of it)"
        )
    if not read_only and entry.mode != "rw":
        raise MountRefused(
            f"host path {host} resolves to {resolved}, under read-only allowlist entry "
            f"{entry.path}; it cannot be mounted ':rw'"
        )
    return resolved


def _entry_realpath(path: str, realpath: Realpath) -> str:
    """An entry's own resolved path; an entry that does not exist stays as written."""
    try:
        return realpath(path)
    except OSError:
        return path
