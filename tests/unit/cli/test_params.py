"""Plain parameter conversion (``gpudock.cli.params``): what typer did, without pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpudock.cli import main as cli
from gpudock.cli import submit_cmd


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    monkeypatch.setattr(submit_cmd, "post_job", lambda data: bodies.append(data) or {"id": 1})
    return bodies


def test_ints_floats_paths_and_lists_convert(posted: list[dict[str, Any]], tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("image: img\n")
    result = CliRunner().invoke(
        cli.app,
        ["submit", "-f", str(spec), "--gpus", "2", "--cpus", "1.5", "-e", "A=1", "-e", "B=2"],
    )

    assert result.exit_code == 0, result.output
    assert posted == [{"image": "img", "gpus": 2, "cpus": 1.5, "env": {"A": "1", "B": "2"}}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "--gpus", "two", "img"], "'--gpus': 'two' is not a number or a range"),
        (["submit", "--gpus", "2-", "img"], "'--gpus': '2-' is not a number or a range"),
        (["submit", "--cpus", "x", "img"], "'--cpus': 'x' is not a valid number;"),
        (["logs", "abc"], "'job_id': 'abc' is not a valid integer;"),
    ],
)
def test_a_bad_value_is_a_usage_error(
    posted: list[dict[str, Any]], args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli.app, args)

    assert result.exit_code == 2
    assert "invalid value for " + message in result.output
    assert posted == []


def test_a_gpu_range_and_elastic_go_to_the_server_as_written(posted: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(cli.app, ["submit", "--gpus", "2-4", "--elastic", "restart", "i"])

    assert result.exit_code == 0, result.output
    assert posted == [{"image": "i", "gpus": "2-4", "elastic": "restart"}]


def test_constrained_options_keep_typers_checks() -> None:
    """``server --port`` has a range: typer's own conversion still checks it."""
    result = CliRunner().invoke(cli.app, ["server", "--port", "0"])

    assert result.exit_code == 2
    assert "invalid value for '--port'" in result.output
