"""The Linux calls behind mount staging, through ctypes: open without symlinks, bind, umount.

Each function raises ``OSError`` with the kernel's errno (``ENOSYS`` where the
kernel lacks the call, which callers treat as "use the older way"). Nothing
here decides anything: ``mount_staging.py`` holds the policy.

* ``open_beneath(base, relative)``: an ``O_PATH`` descriptor of ``relative``
  under the open directory ``base``, no symlink followed in any component,
  never leaving ``base`` (``openat2`` with ``RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH``; before Linux 5.6, one
  ``O_NOFOLLOW`` open per component).
* ``bind_fd(fd, target, read_only)``: bind what ``fd`` refers to (through
  ``/proc/self/fd/N``), with its submounts, onto ``target``, private (no
  mount event propagates out of or into it), read-only throughout if asked
  (``mount_setattr`` with ``AT_RECURSIVE``; before Linux 5.12, a remount of
  each mount of the tree that keeps its other flags).
* ``detach(target)``: lazily unmount ``target`` and everything below it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator

_libc = ctypes.CDLL(None, use_errno=True)
try:
    _libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
    ]
    _libc.mount.restype = ctypes.c_int
    _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    _libc.umount2.restype = ctypes.c_int
    _libc.syscall.restype = ctypes.c_long
except AttributeError:  # not Linux: importable, and ``MountStager.problem`` says why not
    pass

SYS_OPENAT2 = 437  # the same number on every architecture that has it (asm-generic)
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
MOUNT_ATTR_RDONLY = 0x1
_KEPT_FLAGS = {  # statvfs f_flag -> the mount flag a bind remount must repeat to keep it
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _raise(what: str, path: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}", path)


def open_beneath(base: int, relative: str, *, use_openat2: bool = True) -> int:
    """An ``O_PATH`` fd of ``relative`` (no ``..``, no leading ``/``) under directory fd ``base``.

    No component may be a symlink, the last one included (``ELOOP``); the walk
    never leaves ``base`` (``EXDEV``). ``relative`` empty or ``.`` is ``base``
    itself (a new descriptor). The caller closes the result.
    """
    parts = [p for p in relative.split("/") if p and p != "."]
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' is not allowed in a staged path", relative)
    if not parts:
        return os.dup(base)
    if use_openat2:
        how = _OpenHow(
            flags=os.O_PATH | os.O_CLOEXEC,
            resolve=RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH,
        )
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(base),
            ctypes.c_char_p(os.fsencode("/".join(parts))),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter
            _raise("openat2", relative)
    return _open_per_component(base, parts)


def _open_per_component(base: int, parts: list[str]) -> int:
    """``open_beneath`` before ``openat2``: one ``O_NOFOLLOW`` open per component."""
    fd = os.dup(base)
    try:
        for index, part in enumerate(parts):
            nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):  # O_PATH|O_NOFOLLOW opens the link itself
                raise OSError(errno.ELOOP, "a symlink on the way", "/".join(parts[: index + 1]))
            if index < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise OSError(errno.ENOTDIR, "not a directory", "/".join(parts[: index + 1]))
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind_fd(fd: int, target: str, read_only: bool, *, use_setattr: bool = True) -> None:
    """Bind the object ``fd`` refers to, with its submounts, onto ``target``; private.

    ``target`` must exist (a directory for a directory, a file for a file).
    With ``read_only`` every mount of the new tree is read-only; other flags
    (``nosuid``, ``noexec``, ...) stay as the source's. On failure nothing
    stays mounted.
    """
    source = f"/proc/self/fd/{fd}".encode()
    path = os.fsencode(target)
    if _libc.mount(source, path, None, MS_BIND | MS_REC, None) != 0:
        _raise("bind mount", target)
    try:
        _private_and_ro(target, read_only, use_setattr)
    except BaseException:
        detach(target)
        raise


def _private_and_ro(target: str, read_only: bool, use_setattr: bool) -> None:
    path = os.fsencode(target)
    if use_setattr:
        attr = _MountAttr(attr_set=MOUNT_ATTR_RDONLY if read_only else 0, propagation=MS_PRIVATE)
        done = _libc.syscall(
            ctypes.c_long(SYS_MOUNT_SETATTR),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(path),
            ctypes.c_uint(AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
        if done == 0:
            return
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):
            _raise("mount_setattr", target)
    if _libc.mount(None, path, None, MS_REC | MS_PRIVATE, None) != 0:
        _raise("make private", target)
    if read_only:
        for point in [target, *submounts(target)]:
            _remount_read_only(point)


def _remount_read_only(point: str) -> None:
    """Remount one bind mount read-only, repeating the flags it has (a remount resets them)."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    current = os.statvfs(point).f_flag
    for kept, flag in _KEPT_FLAGS.items():
        if current & kept:
            flags |= flag
    if _libc.mount(None, os.fsencode(point), None, flags, None) != 0:
        _raise("read-only remount", point)


def detach(target: str) -> None:
    """Lazily unmount ``target`` and every mount below it; ``EINVAL``/``ENOENT`` (not
    mounted, gone) are no error."""
    failed = _libc.umount2(os.fsencode(target), MNT_DETACH | UMOUNT_NOFOLLOW) != 0
    if failed and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _raise("unmount", target)


def mount_points() -> Iterator[str]:
    """Every mount point of this process's mount namespace (``/proc/self/mountinfo``)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        for line in info:
            fields = line.split(" ")
            if len(fields) > 4:
                yield _unescape(fields[4])


def submounts(target: str) -> list[str]:
    """Mount points strictly below ``target``, parents before children."""
    prefix = target.rstrip("/") + "/"
    return [point for point in mount_points() if point.startswith(prefix)]


def is_mount_point(path: str) -> bool:
    return path in set(mount_points())


def make_private_mount(path: str) -> None:
    """Make directory ``path`` a mount point of its own, private: mounts made below it
    are never copied into other mount namespaces. Idempotent."""
    if not is_mount_point(path):
        encoded = os.fsencode(path)
        if _libc.mount(encoded, encoded, None, MS_BIND, None) != 0:
            _raise("bind mount", path)
    if _libc.mount(None, os.fsencode(path), None, MS_PRIVATE, None) != 0:
        _raise("make private", path)


def _unescape(field: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as ``\040`` etc."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)
