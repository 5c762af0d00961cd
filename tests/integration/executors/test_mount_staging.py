"""Mount staging on the real kernel: bind what was opened, so a swapped path cannot redirect it.

No Docker here: these tests stage mounts exactly as a launch does and look at
what got bound (``test_docker_mount_race.py`` runs containers on top). They
need root (mounts), as the server does.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import require
from tests.kit.mount_race import INSIDE, OUTSIDE, Flipper, RaceHost

from gpudock.core.job import Mount
from gpudock.core.mounts import AllowedMount, MountRefused, resolve_mount
from gpudock.executors import _linux_mounts as linux
from gpudock.executors.mount_staging import MountStager, engine_namespace_problem

TRIES = 200
KERNEL_WAYS = [
    pytest.param({"use_openat2": True, "use_setattr": True}, id="openat2+mount_setattr"),
    pytest.param({"use_openat2": False, "use_setattr": False}, id="per-component+remount"),
]
CLEAR_REASONS = ("changed while it was being mounted", "cannot be resolved", "resolves to")


@pytest.fixture(autouse=True)
def as_root() -> None:
    if os.geteuid() != 0:
        require("root", "mount staging binds folders, which needs CAP_SYS_ADMIN")


def mounted_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    return [p for p in linux.mount_points() if p.startswith(prefix)]


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[Callable[..., MountStager]]:
    """Stagers on one root under ``tmp_path``; after the test nothing may stay mounted."""
    root = tmp_path / "staging"

    def make(**options: object) -> MountStager:
        stager = MountStager(root, **options)  # type: ignore[arg-type]
        assert stager.problem() is None
        return stager

    yield make
    leftovers = mounted_under(root)
    for point in reversed(leftovers):
        linux.detach(point)
    assert leftovers == [], "a staged mount outlived its launch"


def allow(path: Path, mode: str = "rw") -> list[AllowedMount]:
    return [AllowedMount(path=str(path), mode=mode)]  # type: ignore[arg-type]


# ------------------------------------------------------------------ what is bound


@pytest.mark.parametrize("way", KERNEL_WAYS)
def test_a_folder_is_bound_as_opened_read_only_or_not_and_released(
    tmp_path: Path, staging: Callable[..., MountStager], way: dict[str, bool]
) -> None:
    data = tmp_path / "allowed" / "data"
    (data / "real").mkdir(parents=True)
    (data / "real" / "f").write_text("data\n")
    (data / "link").symlink_to("real")  # inside the mounted tree, pointing within it
    stager = staging(**way)
    staged = stager.stage(
        "c1",
        [
            Mount(host=str(data), container="/ro", read_only=True),
            Mount(host=str(data / "real"), container="/rw", read_only=False),
        ],
        allow(tmp_path / "allowed"),
    )
    ro, rw = map(Path, staged.sources)
    assert (ro / "link" / "f").read_text() == "data\n"  # an in-tree symlink still works
    with pytest.raises(OSError) as refused:
        (ro / "new").write_text("x")
    assert refused.value.errno == errno.EROFS
    (rw / "new").write_text("written\n")
    assert (data / "real" / "new").read_text() == "written\n"
    assert {str(ro), str(rw)} <= set(linux.mount_points())

    stager.release(staged)
    assert mounted_under(stager.root) == []
    assert not Path(staged.folder).exists()
    stager.release(staged)  # idempotent


def test_a_symlink_inside_the_allowlist_is_staged_at_its_target(
    tmp_path: Path, staging: Callable[..., MountStager]
) -> None:
    (tmp_path / "allowed" / "work").mkdir(parents=True)
    (tmp_path / "allowed" / "alias").symlink_to(tmp_path / "allowed" / "work")
    stager = staging()
    staged = stager.stage(
        "c1",
        [Mount(host=str(tmp_path / "allowed" / "alias"), container="/w", read_only=False)],
        allow(tmp_path / "allowed"),
    )
    (Path(staged.sources[0]) / "f").write_text("hi\n")
    stager.release(staged)
    assert (tmp_path / "allowed" / "work" / "f").read_text() == "hi\n"


def test_a_file_can_be_staged_and_a_refusal_names_the_mount(
    tmp_path: Path, staging: Callable[..., MountStager]
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "config.yaml").write_text("k: v\n")
    (allowed / "escape").symlink_to("/")
    stager = staging()
    staged = stager.stage(
        "c1", [Mount(host=str(allowed / "config.yaml"), container="/c", read_only=True)],
        allow(allowed),
    )  # fmt: skip
    assert Path(staged.sources[0]).read_text() == "k: v\n"
    stager.release(staged)
    with pytest.raises(MountRefused, match=rf"mount {allowed}/escape:/e refused: .* resolves to /"):
        stager.stage("c2", [Mount(str(allowed / "escape"), "/e", True)], allow(allowed))
    assert os.listdir(stager.root) == []  # nothing half-staged stays


# ------------------------------------------------------------------ the race


def race(host: RaceHost, stager: MountStager, read_only: bool, tries: int) -> tuple[int, list[str]]:
    """Stage ``allowed/flip`` ``tries`` times while it flips; (real folder mounted, refusals).

    Tries start 0-10 ms apart, so they meet the folder in every state. Fails
    at once if a staged mount shows anything but the real folder.
    """
    real = host.real_identity()
    mounted, refusals = 0, []
    mount = Mount(host=str(host.flip), container="/m", read_only=read_only)
    spread = random.Random(tries)
    for n in range(tries):
        time.sleep(spread.uniform(0, 0.010))
        try:
            staged = stager.stage(f"try{n}", [mount], allow(host.allowed))
        except MountRefused as exc:
            refusals.append(str(exc))
            continue
        try:
            source = Path(staged.sources[0])
            info = os.stat(source)
            assert (info.st_dev, info.st_ino) == real, f"try {n} mounted something else"
            assert (source / "marker").read_text() == INSIDE
            if not read_only:
                (source / f"written-{n}").write_text("x")
            mounted += 1
        finally:
            stager.release(staged)
    return mounted, refusals


@pytest.mark.parametrize(
    ("read_only", "way"),
    [
        pytest.param(True, {}, id="ro"),
        pytest.param(False, {}, id="rw"),
        pytest.param(False, {"use_openat2": False, "use_setattr": False}, id="rw-per-component"),
    ],
)
def test_the_flip_race_mounts_the_real_folder_or_is_refused_never_anything_else(
    tmp_path: Path, staging: Callable[..., MountStager], read_only: bool, way: dict[str, bool]
) -> None:
    """200 tries against a folder that flips to ``-> outside`` every 0-20 ms.

    Between the check and the open each try waits 0-20 ms (as Docker's own
    walk came after gpudock's check), so many tries meet a flip mid-way.
    """
    host = RaceHost.make(tmp_path)
    pause = random.Random(7)
    stager = staging(between=lambda: time.sleep(pause.uniform(0, 0.020)), **way)
    with Flipper(host) as flipper:
        mounted, refusals = race(host, stager, read_only, TRIES)
    assert flipper.flips > 20, "the folder hardly flipped: the race was not run"
    assert mounted + len(refusals) == TRIES
    hits = [r for r in refusals if "changed while it was being mounted" in r]
    assert mounted > 0 and hits, (mounted, refusals[:3])  # the flip met tries mid-way
    unclear = [r for r in refusals if not any(reason in r for reason in CLEAR_REASONS)]
    assert unclear == [], unclear[:3]
    assert host.outside_untouched()
    if not read_only:
        assert len(list(host.flip.glob("written-*"))) == mounted


def test_the_same_race_does_escape_a_check_then_bind_by_path(
    tmp_path: Path, staging: Callable[..., MountStager]
) -> None:
    """The harness has teeth: checking the path, then binding it by name (what Docker
    does with a path it is given) mounts ``outside`` within a few tries."""
    host = RaceHost.make(tmp_path)
    target = staging().root / "bind-by-path"
    target.mkdir()
    pause = random.Random(7)
    escaped = 0
    with Flipper(host):
        for _ in range(TRIES):
            time.sleep(pause.uniform(0, 0.010))  # spread as ``race`` does
            try:
                resolve_mount(str(host.flip), True, allow(host.allowed))
            except MountRefused:
                continue
            time.sleep(pause.uniform(0, 0.020))
            if linux._libc.mount(os.fsencode(host.flip), os.fsencode(target), None,
                                 linux.MS_BIND, None) != 0:  # fmt: skip
                continue  # flip was missing at that moment
            try:
                escaped += (target / "marker").read_text() == OUTSIDE
            finally:
                linux.detach(str(target))
            if escaped:
                break
    target.rmdir()
    assert escaped, "the race never hit: the flip test above would prove nothing"


# ------------------------------------------------------------------ crashes


CRASHING_LAUNCH = """
import os, sys
from pathlib import Path
from gpudock.core.job import Mount
from gpudock.core.mounts import AllowedMount
from gpudock.executors.mount_staging import MountStager
stager = MountStager(Path(sys.argv[1]))
stager.stage("crashed", [Mount(sys.argv[2], "/m", False)],
             [AllowedMount(path=sys.argv[2], mode="rw")])
print("staged", flush=True)
if sys.argv[3] == "die":
    os.kill(os.getpid(), 9)
sys.stdin.read()  # stay alive until the test closes stdin
"""


def launch_elsewhere(root: Path, source: Path, then: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CRASHING_LAUNCH), str(root), str(source), then],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "staged\n"
    return process


def test_sweep_removes_a_crashed_launch_and_keeps_live_ones(
    tmp_path: Path, staging: Callable[..., MountStager]
) -> None:
    source = tmp_path / "allowed"
    source.mkdir()
    stager = staging()
    crashed = launch_elsewhere(stager.root, source, "die")
    assert crashed.wait(timeout=30) == -9
    running = launch_elsewhere(stager.root, source, "live")
    ours = stager.stage("ours", [Mount(str(source), "/m", False)], allow(source))
    assert len(mounted_under(stager.root)) == 3

    assert stager.sweep() == 1  # the crashed one only
    assert len(mounted_under(stager.root)) == 2
    assert stager.sweep() == 0  # idempotent

    assert running.stdin is not None
    running.stdin.close()
    running.wait(timeout=30)  # exits without releasing: like a crash
    assert stager.sweep() == 1
    assert mounted_under(stager.root) == [ours.sources[0]]
    stager.release(ours)
    assert os.listdir(stager.root) == []


# ------------------------------------------------------------------ when it cannot


def test_a_staging_folder_owned_by_another_user_disables_staging_with_the_reason(
    tmp_path: Path,
) -> None:
    root = tmp_path / "staging"
    root.mkdir()
    os.chown(root, 65534, 65534)
    problem = MountStager(root).problem()
    assert problem is not None
    assert f"cannot prepare the staging folder {root}: owned by uid 65534" in problem


LISTENER = """
import socket, sys
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1]); server.listen(4)
print("listening", flush=True)
while True:
    server.accept()[0].close()
"""


@pytest.mark.parametrize("isolated", [False, True], ids=["same-namespace", "own-namespace"])
def test_an_engine_in_another_mount_namespace_is_named(tmp_path: Path, isolated: bool) -> None:
    """The engine is whoever answers on its socket; its mount namespace must be ours."""
    socket_path = str(tmp_path / "engine.sock")
    command = [sys.executable, "-c", LISTENER, socket_path]
    if isolated:
        command = ["unshare", "--mount", "--propagation", "private", *command]
    listener = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        problem = engine_namespace_problem(socket_path)
    finally:
        listener.kill()
        listener.wait(timeout=10)
    if isolated:
        assert problem is not None and "runs in another mount namespace" in problem
    else:
        assert problem is None
    with pytest.raises(OSError):
        engine_namespace_problem(str(tmp_path / "nobody.sock"))


PROPAGATION = """
import os, subprocess, sys
from pathlib import Path
from gpudock.core.job import Mount
from gpudock.core.mounts import AllowedMount
from gpudock.executors import _linux_mounts as linux
from gpudock.executors.mount_staging import MountStager
base, peer, data = (Path(sys.argv[1]) / n for n in ("base", "peer", "data"))
for folder in (base, peer, data):
    folder.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "tmp", str(base)], check=True)
subprocess.run(["mount", "--make-shared", str(base)], check=True)
subprocess.run(["mount", "--bind", str(base), str(peer)], check=True)  # a peer: sees base's mounts
stager = MountStager(base / "staging")
assert stager.problem() is None, stager.problem()
staged = stager.stage("c", [Mount(str(data), "/d", True)], [AllowedMount(path=str(data))])
points = set(linux.mount_points())
print(staged.sources[0] in points, staged.sources[0].replace(str(base), str(peer)) in points)
"""


def test_staged_mounts_never_propagate_to_other_mount_namespaces(tmp_path: Path) -> None:
    """Under a shared mount (systemd's default for /), the staging folder is made a
    private mount of its own first: a peer of its parent never receives the staged
    mounts. Run in a mount namespace of its own, so the host is not touched."""
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c",
         PROPAGATION, str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]  # mounted here, not in the peer
