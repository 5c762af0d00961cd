"""Server config: defaults, parsing, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.config import load_config
from gpudock.core.errors import InvalidInput


def test_defaults_are_hardened() -> None:
    cfg = load_config(None)
    ex = cfg.executor
    assert ex.cap_drop_all and ex.no_new_privileges and ex.init and ex.pids_limit > 0
    assert ex.allowed_mounts == [] and cfg.scheduler.placement == "binpack"


def test_yaml_is_parsed_with_units(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "reconcile_interval: 2s\nexecutor:\n  default_memory: 8GiB\n  stop_grace: 1m\n"
        "  allowed_mounts: [/data/]\nscheduler: {placement: spread}\n"
    )
    cfg = load_config(path)
    assert cfg.reconcile_interval == 2.0 and cfg.executor.stop_grace == 60.0
    assert cfg.executor.default_memory == 8 * 1024**3
    assert cfg.executor.allowed_mounts == ["/data"] and cfg.scheduler.placement == "spread"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor:\n  pid_limit: 5\n", "executor.pid_limit: unknown field"),
        ("scheduler: {placement: random}\n", "scheduler.placement"),
        ("executor: {allowed_mounts: [data]}\n", "must be an absolute path"),
        ("- a\n- b\n", "must be a mapping"),
        ("executor: [\n", "not valid YAML"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
