"""The OpenAPI schema says what the server does: schemathesis against a live server.

A real ``gpudock server`` (real dockerd, emulated GPUs) is fuzzed from its own
``/openapi.json`` with an admin token by the ``st`` CLI, bounded in time and
seeded (the seed is printed, so a failure can be replayed with ``--seed``).
Every operation the schema lists is covered, so new endpoints are fuzzed too.

Checks: no 5xx; status codes, content types, headers and bodies as documented;
and both directions of "schema = validation": data valid by the schema is
accepted (``positive_data_acceptance``), data invalid by it is refused
(``negative_data_rejection``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.kit.server import FAST_CONFIG, ServerProcess

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "positive_data_acceptance",
    "negative_data_rejection",
)
MAX_TIME_S = int(os.environ.get("GPUDOCK_SCHEMATHESIS_SECONDS", "120"))
MAX_EXAMPLES = int(os.environ.get("GPUDOCK_SCHEMATHESIS_EXAMPLES", "50"))


def st_binary() -> str:
    found = Path(sys.executable).parent / "st"
    if found.exists():
        return str(found)
    which = shutil.which("st")
    if which is None:
        pytest.fail("schemathesis is not installed (pip install -e '.[dev]')")
    return which


def test_the_live_server_conforms_to_its_openapi_schema(make_server: Any, tmp_path: Path) -> None:
    config = {**FAST_CONFIG, "api": {"max_array_size": 8}}  # generated arrays stay small
    server: ServerProcess = make_server(emulate="4xH100-80GB", config=config).start()
    seed = int(os.environ.get("GPUDOCK_SCHEMATHESIS_SEED", random.randrange(2**31)))
    print(f"schemathesis seed: {seed} (replay: GPUDOCK_SCHEMATHESIS_SEED={seed})")
    junit = tmp_path / "schemathesis.xml"
    args = [
        st_binary(),
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
        "run",
        f"{server.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {server.admin_token}",
        "--checks",
        ",".join(CHECKS),
        "--seed",
        str(seed),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--max-time",
        str(MAX_TIME_S),
        "--workers",
        "2",
        "--suppress-health-check",
        "all",
        "--report",
        "junit",
        "--report-junit-path",
        str(junit),
        "--generation-allow-x00",
        "false",
        "--no-color",
    ]
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=MAX_TIME_S + 120, check=False
    )
    output = result.stdout + result.stderr
    print(output[-20000:])
    assert result.returncode == 0, (
        f"schemathesis found failures (seed {seed}):\n{output[-8000:]}\nserver log:\n{server.log()}"
    )
