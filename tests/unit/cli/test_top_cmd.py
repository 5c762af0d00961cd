"""``gpudock top``'s screen from a frame of API data, its key handling, its imports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from rich.console import Console

from gpudock.cli import top_cmd
from gpudock.cli.top_cmd import Frame, allocation, render

GIB = 1024**3


def gpu(index: int, job: int | None = None, shares: int = 0, used: int = 0) -> dict[str, object]:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "memory_total": 80 * GIB,
        "used_memory": 80 * GIB if job else used,
        "exclusive_job": job,
        "shared_jobs": shares,
        "emulated": True,
        "health": "ok",
    }


FRAME = Frame(
    nodes=[
        {
            "name": "gpu-a",
            "status": "available",
            "gpus": [gpu(0, job=7), gpu(1, shares=2, used=20 * GIB), gpu(2), gpu(3)],
        }
    ],
    jobs=[
        {"id": 9, "user": "bob", "queue": "nlp", "state": "PENDING", "submitted_at": 90.0,
         "name": None, "node": None, "spec": {"gpus": 4},
         "pending_reasons": [{"layer": "devices", "message": "needs 4 GPUs; gpu-a has 2 free",
                              "counterfactual": None}]},
        {"id": 7, "user": "alice", "queue": "vision", "state": "RUNNING", "submitted_at": 10.0,
         "started_at": 40.0, "name": "train", "node": "gpu-a", "spec": {"gpus": 1},
         "pending_reasons": []},
    ],
    queues={"queues": [{"name": "vision", "running_jobs": 1, "pending_jobs": 0,
                        "usage": {"gpus": 1.0}, "guarantee": {"gpus": 2.0},
                        "fair_share": {"gpus": 1.5}, "limit": {"gpus": 3.0}}]},
    at=100.0,
)  # fmt: skip


def screen(frame: Frame, width: int = 140) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(render(frame, width))
    return console.export_text()


def test_the_screen_shows_gpus_with_holders_jobs_with_reasons_and_queues() -> None:
    text = screen(FRAME)
    assert "gpu-a" in text and "emu" in text
    for label in ("0 alice:7", "1 2 shares 25%", "2 idle", "3 idle"):
        assert label in text
    lines = text.splitlines()
    running = next(i for i, line in enumerate(lines) if "alice" in line and "RUNNING" in line)
    pending = next(i for i, line in enumerate(lines) if "bob" in line and "PENDING" in line)
    assert running < pending, "running jobs come first"
    assert "devices: needs 4 GPUs; gpu-a has 2 free" in lines[pending]
    assert "1m" in lines[running]  # running for 60 s
    queue = next(line for line in lines if line.strip().startswith("vision"))
    assert [c for c in queue.split() if c != "│"][1:] == ["1", "0", "1", "2", "1.50", "3"]


def test_a_narrow_terminal_wraps_the_gpu_grid_without_losing_a_gpu() -> None:
    text = screen(FRAME, width=60)
    assert all(label in text for label in ("0 alice:7", "2 idle", "3 idle"))


def test_an_unreachable_server_is_one_line() -> None:
    assert screen(Frame(error="cannot reach the gpudock server")).strip() == (
        "gpudock top: cannot reach the gpudock server"
    )


def test_allocation_is_whole_for_an_exclusive_gpu_and_the_booked_share_otherwise() -> None:
    assert allocation(gpu(0, job=1)) == 1.0
    assert allocation(gpu(1, shares=1, used=20 * GIB)) == 0.25
    assert allocation(gpu(2)) == 0.0


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A pipe standing in for the terminal: write keys to the yielded fd."""
    read, write = os.pipe()
    with os.fdopen(read) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        yield write
    os.close(write)


def test_q_quits_and_other_keys_do_not(keys: int) -> None:
    os.write(keys, b"x")
    assert top_cmd.wait_for_quit(0.2) is False
    os.write(keys, b"q")
    assert top_cmd.wait_for_quit(5) is True


def test_the_command_module_imports_nothing_server_side() -> None:
    code = (
        "import sys; import gpudock.cli.top_cmd; "
        "bad = {'fastapi', 'uvicorn', 'docker', 'numpy', 'scipy'} & set(sys.modules); "
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
