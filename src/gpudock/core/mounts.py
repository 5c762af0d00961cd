"""The bind-mount allowlist: which host paths jobs may mount, and how.

Two checks, one policy::

    submit  check_mount(mount, allowlist)            the path *string*, normalised
    launch  resolve_entry(mount, allowlist)          the path the kernel will bind:
              realpath on the engine's host            every symlink and '..' resolved,
              ──► under an entry that allows the mode  and the entry that governs it

An entry is a host path prefix with a mode: ``ro`` (the default) or ``rw``.
Matching is by whole path components (``/data`` covers ``/data/x``, never
``/database``); when entries nest, the longest match decides the mode. A
mount is read-only unless the job says ``:rw``, and ``:rw`` needs an ``rw``
entry.

Why launch resolves again: Docker follows symlinks in a bind source. A job
that may write under an allowed folder can plant ``link -> /`` there, and a
later job mounting ``<allowed>/link`` would get the host's root. Checking
the string at submit cannot see that; the launch-time check refuses a path
that has left the allowlist, and the executor then opens the resolved path
without following any symlink and binds what it opened
(``gpudock.executors.mount_staging``), so a symlink swapped in after the
check cannot redirect the mount.

Where the host cannot do that, a folder jobs can write (under an ``rw``
entry) is refused whole, with the reason (``unsafe``): its paths could be
swapped between the check and Docker's own walk. See ``docs/operations.md``,
"Mounts".
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


def check_mount(
    host: str, read_only: bool, allowlist: Sequence[AllowedMount], unsafe: str | None = None
) -> None:
    """Submit-time check of the path string; raise ``MountRefused`` naming the entry.

    ``..`` is folded lexically here; symlinks are left to ``resolve_mount``.
    ``unsafe`` (why this host cannot bind mounts race-free, or None) refuses
    every path under an ``rw`` entry, whatever the mount's own mode.
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
    refuse_writable(path, entry, unsafe)


def refuse_writable(path: str, entry: AllowedMount, unsafe: str | None) -> None:
    """Raise ``MountRefused`` if ``unsafe`` and jobs can write under ``entry`` (``rw``)."""
    if unsafe is not None and entry.mode == "rw":
        raise MountRefused(
            f"host path {path} is under allowlist entry {entry.path}, which jobs can write, "
            f"and this server cannot bind such folders safely: {unsafe}"
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
    unsafe: str | None = None,
) -> str:
    """The host path to bind for ``host``, resolved where the engine runs.

    Resolves every symlink, in the last component and in every intermediate
    one, and ``..`` after them (as the kernel does), then requires the result
    to lie under an entry, itself resolved, whose mode allows ``read_only``.
    Raises ``MountRefused`` if the path is missing, loops, or leaves the
    allowlist, or (``unsafe``) lies under an ``rw`` entry. Never creates anything.
    """
    check_mount(host, read_only, allowlist, unsafe)
    resolved, entry = resolve_entry(host, read_only, allowlist, realpath)
    refuse_writable(resolved, entry, unsafe)
    return resolved


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
    return resolve_entry(host, read_only, allowlist, realpath)[0]


def resolve_entry(
    host: str,
    read_only: bool,
    allowlist: Sequence[AllowedMount],
    realpath: Realpath = strict_realpath,
) -> tuple[str, AllowedMount]:
    """``host`` resolved, and the entry (its path resolved too) that governs the result.

    Raises ``MountRefused`` as ``resolve_within`` does. The resolved path lies
    under the entry's path by whole components and holds no symlink, ``.`` or
    ``..`` (at the moment of the call).
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
    return resolved, entry


def _entry_realpath(path: str, realpath: Realpath) -> str:
    """An entry's own resolved path; an entry that does not exist stays as written."""
    try:
        return realpath(path)
    except OSError:
        return path


def staging_notice(unsafe: str | None, allowlist: Sequence[AllowedMount]) -> str | None:
    """The one line a server logs at start when mounts cannot be staged; None if they can
    (or none are allowed)."""
    if unsafe is None or not allowlist:
        return None
    writable = [entry.path for entry in allowlist if entry.mode == "rw"]
    if writable:
        return (
            f"bind mounts under {', '.join(writable)} (rw allowlist entries: folders jobs can "
            f"write) are refused, because mounts cannot be staged here: {unsafe}"
        )
    return (
        f"bind mounts are checked but not staged ({unsafe}); no allowlist entry is rw, "
        "so no job can swap a path under them"
    )
