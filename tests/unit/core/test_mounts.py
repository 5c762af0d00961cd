"""The mount allowlist: path strings at submit, resolved paths at launch (real symlinks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudock.core.mounts import (
    AllowedMount,
    MountRefused,
    check_mount,
    parse_allowlist,
    resolve_mount,
    staging_notice,
)


def allow(*entries: str) -> list[AllowedMount]:
    """``allow("/data:ro", "/scratch:rw")``."""
    return [AllowedMount.model_validate(e) for e in parse_allowlist(list(entries))]


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host tree: allowed ``scratch`` (rw) and ``data`` (ro), and ``secret`` outside both."""
    root = tmp_path.resolve()
    for folder in ("scratch/work", "data/set", "secret"):
        (root / folder).mkdir(parents=True)
    (root / "secret" / "shadow").write_text("root:x\n")
    return root


def entries(host: Path) -> list[AllowedMount]:
    return allow(f"{host}/scratch:rw", f"{host}/data:ro")


# ------------------------------------------------------------------- submit


@pytest.mark.parametrize(
    ("path", "read_only", "message"),
    [
        ("/etc", True, r"not in the admin allowlist \(/data:ro, /scratch:rw\)"),
        ("/database", True, "not in the admin allowlist"),  # whole components only
        ("/scratch/../etc", True, "host path /etc is not in the admin allowlist"),
        ("/data/x", False, "under allowlist entry /data, which is read-only"),
        ("relative", True, "must be absolute"),
    ],
)
def test_submit_refuses_paths_outside_the_allowlist_or_its_mode(
    path: str, read_only: bool, message: str
) -> None:
    with pytest.raises(MountRefused, match=message):
        check_mount(path, read_only, allow("/data:ro", "/scratch:rw"))


def test_submit_accepts_ro_anywhere_allowed_and_rw_under_rw_entries() -> None:
    allowlist = allow("/data:ro", "/scratch:rw", "/data/out:rw")
    for path, read_only in [("/data/x", True), ("/scratch/y", False), ("/data/out/z", False)]:
        check_mount(path, read_only, allowlist)  # no raise


def test_the_longest_entry_decides_the_mode() -> None:
    with pytest.raises(MountRefused, match="entry /scratch/shared, which is read-only"):
        check_mount("/scratch/shared/x", False, allow("/scratch:rw", "/scratch/shared:ro"))


# ------------------------------------------------------------------- launch


def test_a_plain_allowed_path_resolves_to_itself(host: Path) -> None:
    assert resolve_mount(f"{host}/scratch/work", False, entries(host)) == f"{host}/scratch/work"


def test_a_symlink_to_the_host_root_is_refused(host: Path) -> None:
    """The escape of issue 28: ``ln -sfn / <allowed>/link``, then mount ``<allowed>/link``."""
    (host / "scratch" / "link").symlink_to("/")
    for read_only in (True, False):
        with pytest.raises(MountRefused, match="resolves to /, outside the admin allowlist"):
            resolve_mount(f"{host}/scratch/link", read_only, entries(host))


def test_an_intermediate_symlink_is_resolved_too(host: Path) -> None:
    (host / "scratch" / "hop").symlink_to(host / "secret")
    with pytest.raises(MountRefused, match=f"resolves to {host}/secret/shadow, outside"):
        resolve_mount(f"{host}/scratch/hop/shadow", True, entries(host))


def test_dotdot_after_a_symlink_follows_the_kernel_not_the_string(host: Path) -> None:
    """``scratch/deep/..`` is ``secret`` when ``deep`` points into ``secret``: the string
    check folds it to ``scratch`` and accepts, the resolved path does not."""
    (host / "secret" / "inner").mkdir()
    (host / "scratch" / "deep").symlink_to(host / "secret" / "inner")
    path = f"{host}/scratch/deep/.."
    check_mount(path, True, entries(host))  # the string looks harmless
    with pytest.raises(MountRefused, match=f"resolves to {host}/secret, outside"):
        resolve_mount(path, True, entries(host))


def test_a_symlink_into_a_read_only_entry_cannot_be_mounted_rw(host: Path) -> None:
    (host / "scratch" / "to-data").symlink_to(host / "data" / "set")
    with pytest.raises(MountRefused, match=f"under read-only allowlist entry {host}/data"):
        resolve_mount(f"{host}/scratch/to-data", False, entries(host))
    assert resolve_mount(f"{host}/scratch/to-data", True, entries(host)) == f"{host}/data/set"


def test_a_symlink_that_stays_inside_binds_its_target(host: Path) -> None:
    (host / "scratch" / "alias").symlink_to("work")  # relative, within scratch
    assert resolve_mount(f"{host}/scratch/alias", False, entries(host)) == f"{host}/scratch/work"


def test_an_allowlist_entry_that_is_itself_a_symlink_is_compared_resolved(host: Path) -> None:
    (host / "datasets").symlink_to(host / "data")
    allowlist = allow(f"{host}/datasets:ro")
    assert resolve_mount(f"{host}/datasets/set", True, allowlist) == f"{host}/data/set"


@pytest.mark.parametrize("kind", ["missing", "loop"])
def test_missing_or_looping_paths_are_refused(host: Path, kind: str) -> None:
    if kind == "loop":
        os.symlink(host / "scratch" / "b", host / "scratch" / "a")
        os.symlink(host / "scratch" / "a", host / "scratch" / "b")
    with pytest.raises(MountRefused, match="cannot be resolved"):
        resolve_mount(f"{host}/scratch/a", True, entries(host))


def test_the_string_check_still_runs_at_launch(host: Path) -> None:
    with pytest.raises(MountRefused, match="not in the admin allowlist"):
        resolve_mount(f"{host}/secret", True, entries(host))


# ------------------------------------------------------- a host that cannot stage


def test_without_staging_every_path_under_an_rw_entry_is_refused_whatever_its_mode() -> None:
    allowlist = allow("/data:ro", "/scratch:rw", "/data/out:rw")
    why = "cannot bind mounts here (Operation not permitted)"
    for path, read_only in [("/scratch/y", True), ("/scratch/y", False), ("/data/out/z", True)]:
        with pytest.raises(MountRefused, match=r"which jobs can write, and this server .*"):
            check_mount(path, read_only, allowlist, unsafe=why)
    check_mount("/data/x", True, allowlist, unsafe=why)  # nobody writes under /data/x


def test_without_staging_a_resolved_path_under_an_rw_entry_is_refused(host: Path) -> None:
    """The string is under the ro entry; the symlink leads into the writable one."""
    (host / "data" / "to-scratch").symlink_to(host / "scratch" / "work")
    with pytest.raises(MountRefused, match=f"{host}/scratch/work is under allowlist entry"):
        resolve_mount(f"{host}/data/to-scratch", True, entries(host), unsafe="no mounts")


def test_the_start_notice_names_the_refused_entries_or_says_nothing() -> None:
    assert staging_notice(None, allow("/scratch:rw")) is None
    assert staging_notice("no privilege", []) is None
    notice = staging_notice("no privilege", allow("/data:ro", "/scratch:rw"))
    assert notice is not None and "bind mounts under /scratch (rw allowlist entries" in notice
    assert "no privilege" in notice and "\n" not in notice
    quiet = staging_notice("no privilege", allow("/data:ro"))
    assert quiet is not None and "no allowlist entry is rw" in quiet
