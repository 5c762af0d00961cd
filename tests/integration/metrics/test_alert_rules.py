"""The shipped alert rules are valid and behave as their promtool unit tests say."""

from __future__ import annotations

import subprocess

from tests.kit.prometheus import ALERTS_DIR, require_tool


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args],
        cwd=ALERTS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_alert_rules_are_valid() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_every_alert_fires_and_stays_silent_as_its_unit_tests_say() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test() -> None:
    rules = (ALERTS_DIR / "alerts.yml").read_text()
    tests = (ALERTS_DIR / "alerts_test.yml").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert len(alerts) == 9
    for alert in alerts:
        assert f"alertname: {alert}," in tests, f"{alert} has no promtool test"
