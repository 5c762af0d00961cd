"""``gpudock submit`` flags: what reaches ``POST /v1/jobs`` (no server needed).

The server validates the spec (``tests/integration/e2e/test_cli_client.py`` checks
its one-line errors); the CLI only rejects what it cannot send."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpudock.cli import main as cli
from gpudock.cli import submit_cmd


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The JSON bodies ``submit`` would POST; the fake server answers job id 7."""
    bodies: list[dict[str, Any]] = []

    def post_job(data: dict[str, Any]) -> Any:
        bodies.append(data)
        return {"id": 7}

    monkeypatch.setattr(submit_cmd, "post_job", post_job)
    return bodies


def submit(*args: str) -> Any:
    return CliRunner().invoke(cli.app, ["submit", *args])


def test_selector_toleration_and_topology_flags(posted: list[dict[str, Any]]) -> None:
    result = submit(
        "--gpus", "4",
        "--selector", "zone=b", "--selector", "gpu.family=hopper",
        "--toleration", "spot", "--toleration", "reserved=training:NoSchedule",
        "--topology", "nvlink",
        "img", "--", "python", "train.py",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.output.strip() == "7"
    (body,) = posted
    assert body["node_selector"] == {"gpu.family": "hopper", "zone": "b"}
    assert body["tolerations"] == ["spot", "reserved=training:NoSchedule"]
    assert body["topology"] == "nvlink"
    assert body["command"] == ["python", "train.py"]


def test_flags_add_to_a_spec_file(posted: list[dict[str, Any]], tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "image: img\ngpus: 2\nnode_selector: [zone=a, rack=r1]\ntolerations: [spot]\n"
        "topology: numa\n"
    )

    result = submit(
        "-f", str(spec), "--selector", "zone=b", "--toleration", "*", "--topology", "nvlink"
    )

    assert result.exit_code == 0, result.output
    (body,) = posted
    assert body["node_selector"] == {"rack": "r1", "zone": "b"}  # the flag wins for zone
    assert body["tolerations"] == ["spot", "*"]
    assert body["topology"] == "nvlink"


def test_no_placement_flags_send_no_constraints(posted: list[dict[str, Any]]) -> None:
    assert submit("img").exit_code == 0
    (body,) = posted
    assert body == {"image": "img"}


def test_spec_file_errors_exit_2_with_one_message(
    posted: list[dict[str, Any]], tmp_path: Path
) -> None:
    """No traceback for a binary file, a list field that is not a list, or a NaN runtime."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("image: img\ntolerations: 5\nmounts: /a:/b\n")
    for args, message in (
        (["-f", str(binary)], "binary.yaml is not UTF-8 text"),
        (["-f", str(scalar), "--toleration", "spot"], "tolerations must be a list, got 5"),
        (["-f", str(scalar), "--mount", "/c:/d"], "mounts must be a list, got '/a:/b'"),
        (["--selector", "zone", "img"], "--selector 'zone' must look like KEY=VALUE"),
        (["--cpus", "nan", "img"], "cpus: Input should be a finite number"),
    ):
        result = submit(*args)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and result.exception is not None
        assert isinstance(result.exception, SystemExit)
        assert message in " ".join(result.output.split())
    assert posted == []


def test_priority_class_flag_and_no_priority_unless_given(posted: list[dict[str, Any]]) -> None:
    """The server picks the queue's default priority; the CLI must not send a 0 of its own."""
    assert submit("--priority-class", "urgent", "img").exit_code == 0
    assert submit("--priority", "-5", "img").exit_code == 0
    assert submit("img").exit_code == 0

    with_class, lowered, plain = posted
    assert with_class["priority_class"] == "urgent" and "priority" not in with_class
    assert lowered["priority"] == -5 and "priority_class" not in lowered
    assert "priority" not in plain


def test_a_refused_priority_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        raise cli.ClientError("priority 9 is above the limit of 0 in queue default", 403)

    monkeypatch.setattr(cli.Client, "request", refuse)
    result = CliRunner().invoke(cli.app, ["submit", "--priority", "9", "img"])

    assert result.exit_code == 1
    assert result.output == "error: priority 9 is above the limit of 0 in queue default\n"
