"""Run Debian's ``prometheus`` (and ``promtool``) for tests.

``PrometheusProcess`` starts the real server with its own config, data
directory and free port on 127.0.0.1, scraping the given targets every
second, and answers PromQL through the HTTP API. Without the binaries a test
skips, or fails under ``CI=true``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from tests.kit.docker import unavailable
from tests.kit.server import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
ALERTS_DIR = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "gpudock.json"


def require_tool(name: str) -> str:
    """The path of ``name`` (``prometheus`` or ``promtool``); skip, or fail under CI."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (apt-get install -y prometheus)")
    assert path is not None
    return path


class PrometheusProcess:
    """One Prometheus server scraping ``targets`` (``host:port``) every second."""

    def __init__(
        self, workdir: Path, targets: list[str], rule_files: tuple[Path, ...] = ()
    ) -> None:
        self.binary = require_tool("prometheus")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "gpudock",
                    "honor_labels": True,  # gpudock's own `job` label (a job id) wins
                    "static_configs": [{"targets": targets}],
                },
            ],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusProcess:
        args = [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 30, f"prometheus to be ready:\n{self.log()}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return httpx.get(self.url + "/-/ready", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s ``data``; an AssertionError carrying Prometheus' error."""
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_scrapes(self, count: int, timeout: float = 60) -> None:
        """Wait until every target has been scraped ``count`` times, successfully the last time."""
        expr = 'min(count_over_time(up{job="gpudock"}[10m])) and min(up{job="gpudock"}) == 1'

        def scraped() -> bool:
            result = self.query(expr)
            return bool(result) and float(result[0]["value"][1]) >= count

        wait_for(scraped, timeout, f"{count} scrapes:\n{self.log()}")
