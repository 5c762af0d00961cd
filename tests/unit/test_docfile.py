"""YAML and JSON files: a syntax error is one line, ``FILE:LINE:COL: problem``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudock.cli.main import app
from gpudock.config import load_config
from gpudock.core.errors import InvalidInput
from gpudock.docfile import DocumentError, key_positions, load_document


@pytest.mark.parametrize(
    ("name", "text", "where", "problem"),
    [
        ("job.yaml", "image: img\ngpus: 2\n  cpus: 4\n", "3:7",
         "mapping values are not allowed here"),
        ("job.yaml", "image: [img\n", "2:1", "expected ',' or ']', but got '<stream end>'"),
        ("job.yaml", "image: 'img\n", "2:1", "found unexpected end of stream"),
        ("job.json", '{"image": "img",\n "gpus": }\n', "2:10", "Expecting value"),
        ("job.json", '{"image": "img" "gpus": 1}', "1:17", "Expecting ',' delimiter"),
    ],
)  # fmt: skip
def test_a_syntax_error_names_the_file_line_and_column(
    tmp_path: Path, name: str, text: str, where: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text)

    with pytest.raises(DocumentError) as caught:
        load_document(path)

    assert str(caught.value) == f"{path}:{where}: {problem}"


def test_json_is_read_as_json_and_yaml_reads_json_too(tmp_path: Path) -> None:
    for name in ("job.json", "job.yaml"):
        (tmp_path / name).write_text('{"image": "img", "gpus": 2}')
        assert load_document(tmp_path / name) == {"image": "img", "gpus": 2}


def test_key_positions_are_one_based(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("# a job\nimage: img\n\ngpu_mem: 20GiB\n")

    assert key_positions(path) == {"image": (2, 1), "gpu_mem": (4, 1)}
    assert key_positions(tmp_path / "missing.yaml") == {}


def test_submit_and_the_server_config_report_it_in_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("image: img\ngpus: 2\n  cpus: 4\n")

    result = CliRunner().invoke(app, ["submit", "-f", str(job)])

    assert result.exit_code == 2
    assert result.output == f"error: {job}:3:7: mapping values are not allowed here\n"
    with pytest.raises(InvalidInput, match=rf"^config {job}:3:7: mapping values are not allowed"):
        load_config(job)
