"""The simulator report: four valid PNGs and an escaped, self-contained index.html."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudock.sim.report import PLOTS, write_report
from gpudock.sim.results import JobRecord, RunRecord

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(
    policy: str,
    jct_scale: float,
    *,
    oracle: bool = False,
    queues: tuple[str, ...] = ("team-a", "team-b"),
) -> RunRecord:
    """Six jobs per queue over ~an hour; JCTs scale with ``jct_scale``."""
    record = RunRecord(
        policy=policy, description=f"the {policy} policy", oracle=oracle, total_gpus=8
    )
    for q_index, queue in enumerate(queues):
        for i in range(6):
            submit = 600.0 * i + q_index
            start = submit + 30.0 * i * jct_scale
            end = start + 300.0 * jct_scale
            record.jobs.append(
                JobRecord(f"{queue}-{i}", queue, submit, end - start, 1.0, start, end)
            )
        record.queue_share[queue] = [(0.0, 2.0 + q_index), (3000.0, 1.0)]
        record.entitled[queue] = 1 / len(queues)
    record.jobs.append(JobRecord("stuck", queues[0], 100.0, 50.0, 8.0))  # never started
    record.utilization = [(0.0, 4.0), (1800.0, 8.0), (3600.0, 2.0)]
    record.preemptions = int(10 * jct_scale)
    record.horizon = 10_000.0
    return record


def recommendation(page: str) -> str:
    match = re.search(r'<p class="recommendation">(.*?)</p>', page, re.S)
    assert match is not None
    return match.group(1)


@pytest.fixture
def runs() -> list[RunRecord]:
    return [make_run("srtf", 0.5, oracle=True), make_run("fifo", 2.0), make_run("default", 1.0)]


def test_writes_four_valid_pngs_and_an_index(tmp_path: Path, runs: list[RunRecord]) -> None:
    out = tmp_path / "nested" / "report"
    index = write_report(runs, out, title="Sim", trace="philly.csv", cluster="8xH100")
    assert index == out / "index.html"
    assert index.is_file()
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 5_000, name
    assert sorted(p.name for p in out.iterdir()) == sorted([*PLOTS, "index.html"])


def test_index_is_self_contained_and_names_every_policy(
    tmp_path: Path, runs: list[RunRecord]
) -> None:
    page = write_report(
        runs, tmp_path, title="Sim", trace="philly.csv", cluster="8xH100"
    ).read_text()
    for policy in ("srtf", "fifo", "default"):
        assert policy in page
    for name in PLOTS:
        assert f'<img src="{name}"' in page
    assert "<style>" in page
    assert "http://" not in page and "https://" not in page
    assert "philly.csv" in page and "8xH100" in page
    assert "team-a" in page and "team-b" in page


def test_recommends_the_best_deployable_policy_never_the_oracle(
    tmp_path: Path, runs: list[RunRecord]
) -> None:
    # srtf (an oracle) has the best JCTs; default is the best deployable one.
    page = write_report(runs, tmp_path, title="Sim", trace="t", cluster="c").read_text()
    text = recommendation(page)
    assert text.startswith("Recommended: default.")
    assert "Recommended: srtf" not in text
    assert "the srtf oracle" in text
    assert 'class="best">default<' in page


def test_user_strings_are_html_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    record = make_run("p&q", 1.0, queues=(evil, "a$b$c"))
    record.description = '<img src=x onerror="x">'
    page = write_report(
        [record], tmp_path, title="<b>t</b>", trace="<t>", cluster="<c>"
    ).read_text()
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page
    assert "<b>t</b>" not in page
    assert "p&amp;q" in page
    assert (tmp_path / "queue_share.png").read_bytes().startswith(PNG_MAGIC)


def test_many_queues_plot_the_top_12_and_say_so(tmp_path: Path) -> None:
    queues = tuple(f"q{i:02d}" for i in range(20))
    page = write_report(
        [make_run("fifo", 1.0, queues=queues)], tmp_path, title="t", trace="t", cluster="c"
    ).read_text()
    assert "Showing the top 12 of 20 queues" in page
    assert "q19" in page  # the table still lists every queue


def test_a_run_with_nothing_finished_still_reports(tmp_path: Path) -> None:
    empty = RunRecord(policy="idle", description="", oracle=False, total_gpus=8)
    empty.jobs.append(JobRecord("stuck", "q", 0.0, 10.0, 1.0))
    page = write_report([empty], tmp_path, title="t", trace="t", cluster="c").read_text()
    assert "none is recommended" in recommendation(page)
    for name in PLOTS:
        assert (tmp_path / name).read_bytes().startswith(PNG_MAGIC)


def test_rewriting_a_report_replaces_it(tmp_path: Path, runs: list[RunRecord]) -> None:
    write_report(runs, tmp_path, title="Report-Alpha", trace="t", cluster="c")
    page = write_report(runs[:2], tmp_path, title="Report-Beta", trace="t", cluster="c").read_text()
    assert "Report-Beta" in page and "Report-Alpha" not in page
    assert "default" not in page


def test_no_runs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs"):
        write_report([], tmp_path, title="t", trace="t", cluster="c")
    assert not (tmp_path / "index.html").exists()
