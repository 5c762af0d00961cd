"""Bind mounts no job can redirect: gpudock opens the source, Docker binds a copy of it.

The race this closes: the launch check resolves ``<allowed>/flip`` and finds
a folder; a job that can write under ``<allowed>`` swaps ``flip`` for a
symlink to ``/``; Docker then walks the path again and binds the host's root.
Two path walks, and a user owns the path between them. So gpudock walks once
and hands Docker something no user can change::

    stage(name, mounts)                                  for each mount, at launch
      resolve_entry: realpath, inside an allowed entry ──no──► MountRefused (the reason)
      │ (a test may pause here: the window a job would race)
      ▼
      open the entry's real path, then the rest beneath it, following no symlink
      (openat2 RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH) ──a symlink or a gap appeared──►
      │                                                  MountRefused "changed while…"
      ▼
      bind /proc/self/fd/N (what was opened, submounts too) onto
      <root>/<pid>.<start>.<seq>.<name>/<i>, private; read-only throughout if ``ro``
      ▼
    Docker binds <root>/…/<i>: a path of root-only directories no job can touch
    release(staged)                                      after ``start``: unmount, remove

The container keeps its own copy of the mount once started, so a staging
mount lives only from create to start. ``sweep`` removes what a process that
died (``kill -9``) left; it is idempotent and skips launches still in flight.

Assumes the engine's runtime (dockerd, containerd, runc) resolves paths in
this process's mount namespace: the mounts under ``root`` are private, so a
daemon in another namespace would see only their empty mount points
(``docker_namespace_problem`` checks it). ``problem()`` says, once, why this
host cannot stage (no mount privilege, no ``/proc``), or None.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudock.core.job import Mount
from gpudock.core.mounts import (
    AllowedMount,
    MountRefused,
    check_mount,
    resolve_entry,
    strict_realpath,
)
from gpudock.executors import _linux_mounts as linux

log = logging.getLogger("gpudock.executors.mounts")

# Launch folders in flight in this process, whichever stager made them: two stagers on
# one root (two executors in one process) must never sweep each other's.
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()
_SEQ = itertools.count(1)

_REASONS = {
    errno.ELOOP: "a symlink appeared on the way",
    errno.ENOENT: "part of it disappeared",
    errno.ENOTDIR: "a folder on the way was replaced by a file",
    errno.EXDEV: "it left its allowlist entry",
}


@dataclass(frozen=True, slots=True)
class Staged:
    """One launch's staged mounts: ``sources[i]`` is what Docker binds for mount ``i``."""

    folder: str
    sources: tuple[str, ...]


class MountStager:
    """Stages bind sources under ``root`` (created 0700 if missing; must be this user's).

    ``use_openat2``/``use_setattr`` False take the older kernels' ways (tests
    cover both). ``between`` runs between the check and the open of each
    mount: a test seam that widens the window a racing job would need.
    """

    def __init__(
        self,
        root: Path,
        *,
        use_openat2: bool = True,
        use_setattr: bool = True,
        between: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self._openat2 = use_openat2
        self._setattr = use_setattr
        self._between = between
        self._lock = threading.Lock()
        self._problem: str | None = None
        self._probed = False
        self._me = _process_tag(os.getpid())

    # ------------------------------------------------------------------ capability

    def problem(self) -> str | None:
        """Why mounts cannot be staged on this host (one line), or None; probed once."""
        with self._lock:
            if not self._probed:
                self._problem = self._probe()
                self._probed = True
            return self._problem

    def _probe(self) -> str | None:
        """Prepare ``root`` and bind, read-only, a scratch folder once; the first failure."""
        if not sys.platform.startswith("linux"):
            return "binding an opened folder needs Linux"
        if not os.path.isdir("/proc/self/fd"):
            return "/proc is not mounted, so an opened folder cannot be bound"
        try:
            self._prepare_root()
        except OSError as exc:
            return f"cannot prepare the staging folder {self.root}: {exc.strerror or exc}"
        trial = self.root / f"probe.{self._me}.{next(_SEQ)}"
        try:
            self._trial(trial)
        except OSError as exc:
            return (
                f"cannot bind mounts here ({exc.strerror or exc}); "
                "staging needs root (CAP_SYS_ADMIN) in the host's mount namespace"
            )
        finally:
            _remove_folder(str(trial))
        return None

    def _prepare_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(self.root)
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, "not a directory (a symlink?)")
        if info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {info.st_uid}, not this process's")
        os.chmod(self.root, 0o700)
        if _propagates(str(self.root)):
            linux.make_private_mount(str(self.root))

    def _trial(self, trial: Path) -> None:
        (trial / "source").mkdir(parents=True, mode=0o700)
        (trial / "source" / "marker").write_text("staged\n")
        (trial / "target").mkdir(mode=0o700)
        base = os.open(trial, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = linux.open_beneath(base, "source", use_openat2=self._openat2)
        finally:
            os.close(base)
        try:
            linux.bind_fd(fd, str(trial / "target"), True, use_setattr=self._setattr)
        finally:
            os.close(fd)
        try:
            if (trial / "target" / "marker").read_text() != "staged\n":
                raise OSError(errno.EIO, "the bound folder shows other content")
            try:
                (trial / "target" / "written").write_text("x")
            except OSError as exc:
                if exc.errno != errno.EROFS:
                    raise
            else:
                raise OSError(errno.EIO, "a read-only bind stayed writable")
        finally:
            linux.detach(str(trial / "target"))

    # ------------------------------------------------------------------ staging

    def stage(self, name: str, mounts: Sequence[Mount], allowed: Sequence[AllowedMount]) -> Staged:
        """Stage every mount of one launch; ``MountRefused`` (nothing left staged) if one
        may not or cannot be bound. Call ``release`` when the container has started."""
        folder = self.root / f"{self._me}.{next(_SEQ)}.{name}"
        with _LIVE_LOCK:
            _LIVE.add(folder.name)
        sources: list[str] = []
        try:
            folder.mkdir(mode=0o700)
            for index, mount in enumerate(mounts):
                try:
                    sources.append(self._stage_one(mount, allowed, str(folder / str(index))))
                except MountRefused as exc:
                    where = f"{mount.host}:{mount.container}"
                    raise MountRefused(f"mount {where} refused: {exc}") from None
        except BaseException:
            self.release(Staged(str(folder), tuple(sources)))
            raise
        return Staged(str(folder), tuple(sources))

    def _stage_one(self, mount: Mount, allowed: Sequence[AllowedMount], target: str) -> str:
        check_mount(mount.host, mount.read_only, allowed)  # the string, as at submit
        resolved, entry = resolve_entry(mount.host, mount.read_only, allowed, strict_realpath)
        if self._between is not None:
            self._between()
        try:
            fd = self._open(entry.path, resolved)
        except OSError as exc:
            why = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
            raise MountRefused(
                f"host path {mount.host} changed while it was being mounted ({why}); "
                "it was not mounted"
            ) from None
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target, 0o700)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            linux.bind_fd(fd, target, mount.read_only, use_setattr=self._setattr)
        except OSError as exc:
            _remove_entry(target)
            raise MountRefused(
                f"host path {mount.host} could not be bound for the container: "
                f"{exc.strerror or exc}"
            ) from None
        finally:
            os.close(fd)
        return target

    def _open(self, base: str, resolved: str) -> int:
        """``resolved`` opened beneath ``base`` (the entry's real path), no symlink followed."""
        top = os.open(base, os.O_PATH | os.O_CLOEXEC)
        try:
            return linux.open_beneath(top, resolved[len(base) :], use_openat2=self._openat2)
        finally:
            os.close(top)

    def release(self, staged: Staged) -> None:
        """Unmount and remove one launch's staging folder. Idempotent; never raises."""
        try:
            _remove_folder(staged.folder)
        except OSError as exc:  # left for ``sweep``
            log.warning("could not remove staged mounts %s: %s", staged.folder, exc)
            return
        with _LIVE_LOCK:
            _LIVE.discard(Path(staged.folder).name)

    def sweep(self) -> int:
        """Remove staging folders no live launch owns (a crashed process's); how many.

        Skips this process's launches in flight and folders of other processes
        still alive (the same pid and start time). Idempotent.
        """
        try:
            names = os.listdir(self.root)
        except OSError:
            return 0
        removed = 0
        for name in names:
            with _LIVE_LOCK:
                if name in _LIVE:
                    continue
            parts = name.split(".")
            owner = parts[1:3] if parts[0] == "probe" else parts[0:2]
            if ".".join(owner) == self._me and parts[0] == "probe":
                continue  # another stager of this process is probing
            if ".".join(owner) != self._me and _alive(owner):
                continue  # another server's launch, still running
            try:
                _remove_folder(str(self.root / name))
                removed += 1
            except OSError as exc:
                log.warning("could not remove leftover staged mounts %s: %s", name, exc)
        if removed:
            log.info("removed %d staging folder(s) left by a stopped server", removed)
        return removed


def _remove_folder(folder: str) -> None:
    """Detach and remove each entry of a staging folder, then the folder.

    Never recursive beyond one level: an entry still mounted is refused by
    ``rmdir``/``unlink`` (``EBUSY``) rather than emptied. ``ENOENT`` is no error.
    """
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return
    for entry in entries:
        target = os.path.join(folder, entry)
        linux.detach(target)
        if entry in ("source", "target"):  # a probe's folders
            for sub in ("marker", "written"):
                _remove_entry(os.path.join(target, sub))
        _remove_entry(target)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(folder)


def _remove_entry(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)


def _propagates(path: str) -> bool:
    """Whether new mounts under ``path`` would be copied to other namespaces (a shared mount)."""
    best, shared = "", False
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        for line in info:
            fields = line.split(" ")
            point = linux._unescape(fields[4]) if len(fields) > 4 else ""
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                tags = fields[6 : fields.index("-")] if "-" in fields else []
                best, shared = point, any(tag.startswith("shared:") for tag in tags)
    return shared


def _process_tag(pid: int) -> str:
    """``pid.starttime``: names a process uniquely across pid reuse."""
    return f"{pid}.{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _alive(owner: list[str]) -> bool:
    """Whether the process ``[pid, starttime]`` still runs; False for a malformed name."""
    if len(owner) != 2 or not owner[0].isdigit():
        return False
    return _start_time(int(owner[0])) == owner[1]


def engine_namespace_problem(socket_path: str) -> str | None:
    """Why the daemon on unix socket ``socket_path`` would not see this process's mounts.

    Asks the kernel which process answers on the socket (``SO_PEERCRED``) and
    compares its mount namespace with this process's. Raises ``OSError`` when
    the socket does not answer (the engine is down: ask again later).
    """
    import socket
    import struct

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(socket_path)
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid = struct.unpack("3i", raw)[0]
    if pid <= 0:
        return (
            f"the engine on {socket_path} runs in another PID namespace (is gpudock in a "
            "container?), so it would not see the mounts gpudock stages"
        )
    try:
        theirs = os.readlink(f"/proc/{pid}/ns/mnt")
        ours = os.readlink("/proc/self/ns/mnt")
    except OSError as exc:
        return f"cannot read the engine's mount namespace (pid {pid}): {exc.strerror or exc}"
    if theirs != ours:
        return (
            f"the engine on {socket_path} (pid {pid}) runs in another mount namespace, "
            "so it would not see the mounts gpudock stages"
        )
    return None
