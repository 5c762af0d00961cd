"""Trace loaders: every format, malformed rows with exact lines, windows, tar members.

Inline CSVs are written to ``tmp_path``; the real traces are found by
``tests/kit/traces.real`` (``$GPUDOCK_TRACES``, else ``../shared/traces`` beside the
project root); those tests fail under ``CI=true`` when they are missing, else skip.
"""

from __future__ import annotations

import io
import tarfile
from datetime import date, datetime
from pathlib import Path

import pytest
from tests.kit.traces import real

from gpudock.sim.traces import (
    FORMATS,
    BadRow,
    TraceError,
    TraceJob,
    as_gang,
    detect_format,
    load_trace,
)

CANONICAL = "job_id,submit_time,duration,num_gpus\n"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ALIBABA = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
ITP = "job_id,submission_time,duration,num_gpu\n"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def message(path: Path, fmt: str = "canonical", **kwargs: object) -> str:
    with pytest.raises(TraceError) as caught:
        load_trace(path, fmt, **kwargs)  # type: ignore[arg-type]
    return str(caught.value)


# ── canonical ──────────────────────────────────────────────────────────────


def test_jobs_are_sorted_by_submission_and_shifted_to_start_at_zero(tmp_path: Path) -> None:
    path = write(tmp_path, CANONICAL + "late,130,10,1\nfirst,100,5,2\ntie,130,7,0\n")
    trace = load_trace(path)
    assert [(j.job_id, j.submit_time) for j in trace.jobs] == [
        ("first", 0.0),
        ("late", 30.0),
        ("tie", 30.0),  # equal submit times keep file order
    ]
    assert trace.origin == 100.0 and trace.format == "canonical" and trace.skipped == []
    assert trace.source == str(path)


def test_canonical_optional_columns_fill_every_field(tmp_path: Path) -> None:
    header = (
        "job_id,submit_time,duration,num_gpus,gpu_fraction,queue,priority,gpu_model,"
        "max_runtime,nodes,cpus,memory_mib\n"
    )
    path = write(tmp_path, header + "a,0,60,1,0.25,vision,5,H100,120,1,4,8192\nb,1,60,8,,,,,,2,,\n")
    a, b = load_trace(path).jobs
    assert a == TraceJob(
        "a", 0.0, 60.0, 1, 0.25, "vision", 5, "H100", 120.0, 1, 4.0, 8192, ("H100",)
    )
    assert b == TraceJob("b", 1.0, 60.0, 8, nodes=2)  # empty cells mean "not set"
    assert b.total_gpus == 16 and a.total_gpus == 0.25


def test_a_mig_column_asks_for_one_device(tmp_path: Path) -> None:
    path = write(
        tmp_path, "job_id,submit_time,duration,num_gpus,mig\na,0,60,1,3g.40gb\nb,1,60,2,\n"
    )
    a, b = load_trace(path).jobs
    assert (a.mig, b.mig) == ("3g.40gb", None)
    assert a.total_gpus == 3 / 7  # its compute slices of the GPU's 7
    for row, problem in (("c,0,60,2,1g.10gb", "cannot be combined with gpus: 2"),
                         ("c,0,60,1,big", "is not a MIG profile name")):  # fmt: skip
        bad = write(tmp_path, f"job_id,submit_time,duration,num_gpus,mig\n{row}\n", "bad.csv")
        with pytest.raises(TraceError, match=problem):
            load_trace(bad)


def test_a_gpu_model_list_keeps_all_models_and_sets_no_single_model(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,submit_time,duration,num_gpus,gpu_model\na,0,1,1,V100|A100\n")
    (job,) = load_trace(path).jobs
    assert job.gpu_models == ("V100", "A100") and job.gpu_model is None


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("b,5,abc,1", "duration 'abc' is not a number"),
        ("b,5,-5,1", "duration '-5' must be greater than 0"),
        ("b,5,0,1", "duration '0' must be greater than 0"),
        ("b,5,nan,1", "duration 'nan' is not a finite number"),
        ("b,5,,1", "duration is empty"),
        ("b,-1,5,1", "submit_time '-1' must be at least 0"),
        ("b,5,5,1.5", "num_gpus '1.5' is not a whole number"),
        ("b,5,5,-2", "num_gpus '-2' must be at least 0"),
        (",5,5,1", "job_id is empty"),
        ("b,5,5", "expected 4 fields, got 3"),
        ("a,5,5,1", "duplicate job_id 'a' (first on line 2)"),
    ],
)
def test_a_malformed_row_names_file_line_and_problem(
    tmp_path: Path, row: str, problem: str
) -> None:
    path = write(tmp_path, CANONICAL + f"a,0,10,1\n{row}\n", name="philly.csv")
    assert message(path) == f"philly.csv line 3: {problem}"


@pytest.mark.parametrize(
    ("extra", "row", "problem"),
    [
        ("gpu_fraction", "a,0,1,1,1.5", "gpu_fraction '1.5' must be in (0, 1]"),
        ("gpu_fraction", "a,0,1,1,0", "gpu_fraction '0' must be in (0, 1]"),
        ("gpu_fraction", "a,0,1,0,0.5", "gpu_fraction '0.5' needs num_gpus >= 1"),
        ("nodes", "a,0,1,8,0", "nodes '0' must be at least 1"),
        ("nodes", "a,0,1,8,2.5", "nodes '2.5' is not a whole number"),
        ("max_runtime", "a,0,1,8,-1", "max_runtime '-1' must be greater than 0"),
        ("priority", "a,0,1,8,high", "priority 'high' is not a number"),
        ("restart_overhead", "a,0,1,8,-5", "restart_overhead '-5' must be at least 0"),
        ("restart_overhead", "a,0,1,8,soon", "restart_overhead 'soon' is not a number"),
        ("checkpoint_interval", "a,0,1,8,0", "checkpoint_interval '0' must be greater than 0"),
    ],
)
def test_optional_columns_are_validated_too(
    tmp_path: Path, extra: str, row: str, problem: str
) -> None:
    path = write(tmp_path, f"job_id,submit_time,duration,num_gpus,{extra}\n{row}\n")
    assert message(path) == f"trace.csv line 2: {problem}"


def test_a_job_s_own_restart_cost_comes_from_the_trace(tmp_path: Path) -> None:
    """Empty cells leave the run's ``--restart-overhead`` and ``--checkpoint-interval``."""
    header = "job_id,submit_time,duration,num_gpus,restart_overhead,checkpoint_interval\n"
    path = write(tmp_path, header + "a,0,10,1,120,1800\nb,1,10,1,0,\nc,2,10,1,,\n")
    jobs = load_trace(path).jobs
    assert [(j.restart_overhead, j.checkpoint_interval) for j in jobs] == [
        (120.0, 1800.0),
        (0.0, None),
        (None, None),
    ]


def test_line_numbers_count_the_header_and_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, CANONICAL + "a,0,10,1\n\nb,1,oops,1\n")
    assert message(path) == "trace.csv line 4: duration 'oops' is not a number"


def test_skip_bad_rows_collects_every_bad_row_and_loads_the_rest(tmp_path: Path) -> None:
    rows = "a,0,10,1\nb,1,-3,1\nc,2,10,x\na,3,10,1\nd,4,10,2\n"
    trace = load_trace(write(tmp_path, CANONICAL + rows), skip_bad_rows=True)
    assert [j.job_id for j in trace.jobs] == ["a", "d"]
    assert trace.skipped == [
        BadRow(3, "duration '-3' must be greater than 0"),
        BadRow(4, "num_gpus 'x' is not a number"),
        BadRow(5, "duplicate job_id 'a' (first on line 2)"),
    ]


def test_a_missing_required_column_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,submit_time,num_gpus\na,0,1\n")
    text = message(path)
    assert text.startswith("trace.csv line 1: missing required column 'duration'")
    assert "job_id, submit_time, duration, num_gpus" in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_empty_file_is_an_error_not_an_empty_trace(tmp_path: Path, fmt: str) -> None:
    assert message(write(tmp_path, ""), fmt).startswith("trace.csv: file is empty")


def test_a_header_without_rows_is_an_empty_trace(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, CANONICAL))
    assert trace.jobs == [] and trace.origin == 0.0


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    assert message(tmp_path / "nope.csv") == f"nope.csv: no such file: {tmp_path / 'nope.csv'}"


def test_a_directory_or_binary_file_is_a_trace_error(tmp_path: Path) -> None:
    assert "is a directory" in message(tmp_path)
    binary = tmp_path / "blob.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert message(binary).startswith("blob.csv: is not UTF-8 text")


def test_trace_error_is_a_value_error_with_its_parts(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        load_trace(write(tmp_path, CANONICAL + "a,0,x,1\n"))
    error = caught.value
    assert isinstance(error, TraceError)
    assert (error.source, error.line, error.problem) == (
        "trace.csv",
        2,
        "duration 'x' is not a number",
    )


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown trace format 'slurm'"):
        load_trace(write(tmp_path, CANONICAL), "slurm")  # type: ignore[arg-type]


def test_start_and_end_are_seconds_inclusive_then_exclusive(tmp_path: Path) -> None:
    path = write(tmp_path, CANONICAL + "a,10,1,1\nb,20,1,1\nc,30,1,1\n")
    trace = load_trace(path, start=20, end="30")
    assert [(j.job_id, j.submit_time) for j in trace.jobs] == [("b", 0.0)]
    assert trace.origin == 20.0


def test_rows_outside_the_window_are_still_validated(tmp_path: Path) -> None:
    path = write(tmp_path, CANONICAL + "a,10,1,1\nb,20,x,1\n")
    assert message(path, end=15) == "trace.csv line 3: duration 'x' is not a number"


def test_a_date_window_is_refused_for_a_seconds_clock(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="start for a canonical trace is seconds"):
        load_trace(write(tmp_path, CANONICAL), start="2017-10-01")


# ── philly ─────────────────────────────────────────────────────────────────

PHILLY_ROWS = (
    "2017-10-01 00:00:10,66.0,1,66.0,vc1\n"
    "2017-09-30 23:59:59,10.0,8,80.0,vc2\n"
    "2017-10-01 00:00:00,30.0,16,480.0,vc1\n"
    "2017-12-01 00:00:00,5.0,2,10.0,vc3\n"
)


def test_philly_ids_are_row_indexes_and_clusters_are_queues(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, PHILLY + PHILLY_ROWS), "philly")
    assert [(j.job_id, j.submit_time, j.queue, j.num_gpus) for j in trace.jobs] == [
        ("2", 0.0, "vc2", 8),
        ("3", 1.0, "vc1", 16),
        ("1", 11.0, "vc1", 1),
        ("4", 5270401.0, "vc3", 2),
    ]
    # origin: the earliest timestamp, as POSIX seconds of the wall clock read as UTC
    assert (
        trace.origin == (datetime(2017, 9, 30, 23, 59, 59) - datetime(1970, 1, 1)).total_seconds()
    )


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2017-10-01", "2017-12-01"),
        (date(2017, 10, 1), date(2017, 12, 1)),
        (datetime(2017, 10, 1), "2017-12-01 00:00:00"),
    ],
)
def test_philly_windows_are_wall_clock_start_inclusive_end_exclusive(
    tmp_path: Path, start: object, end: object
) -> None:
    path = write(tmp_path, PHILLY + PHILLY_ROWS)
    trace = load_trace(path, "philly", start=start, end=end)  # type: ignore[arg-type]
    assert [(j.job_id, j.submit_time) for j in trace.jobs] == [("3", 0.0), ("1", 10.0)]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (3600.0, "start for a philly trace is a date or datetime"),
        ("October", "start 'October' is not an ISO date or datetime"),
        ("2017-10-01T00:00:00+00:00", "start must be naive"),
    ],
)
def test_philly_windows_must_be_dates(tmp_path: Path, value: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        load_trace(write(tmp_path, PHILLY), "philly", start=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("2017-10-01 0x:00:00,1.0,1,1.0,vc", "timestamp '2017-10-01 0x:00:00' is not a"),
        ("2017-10-01 00:00:00,0.0,1,0.0,vc", "duration '0.0' must be greater than 0"),
        ("2017-10-01 00:00:00,1.0,1,1.0,", "cluster is empty"),
    ],
)
def test_philly_bad_rows(tmp_path: Path, row: str, problem: str) -> None:
    path = write(tmp_path, PHILLY + PHILLY_ROWS + row + "\n", name="philly.csv")
    assert message(path, "philly").startswith(f"philly.csv line 6: {problem}")


def test_real_philly_trace_has_82247_jobs() -> None:
    trace = load_trace(real("philly/philly.csv"), "philly")
    assert len(trace.jobs) == 82_247 and trace.skipped == [] and trace.adjusted == []
    assert trace.jobs[0].submit_time == 0.0 and min(j.duration for j in trace.jobs) >= 1.0


def test_real_philly_benchmark_window_has_68510_jobs_68503_in_listed_vcs() -> None:
    """Helios's window, Oct 1 to Nov 30 2017: 7 of its jobs are in VCs philly_vc.csv lacks."""
    trace = load_trace(real("philly/philly.csv"), "philly", start="2017-10-01", end="2017-12-01")
    assert len(trace.jobs) == 68_510
    vc_file = real("philly/philly_vc.csv").read_text().splitlines()[1:]
    listed = {line.split(",")[0] for line in vc_file if line}
    assert sum(job.queue in listed for job in trace.jobs) == 68_503


# ── alibaba ────────────────────────────────────────────────────────────────

ALIBABA_ROWS = (
    "pod-a,12000,16384,1,1000,,LS,Running,100,600,100\n"
    "pod-b,6000,12288,1,460,T4,BE,Running,150,250,150\n"
    "pod-c,88000,327680,8,1000,V100M16|V100M32,Burstable,Succeeded,200,1200,201\n"
    "pod-d,2000,4096,0,0,nan,Guaranteed,Failed,300,400,300\n"
)


def test_alibaba_pods_map_to_fractions_queues_cpus_and_models(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, ALIBABA + ALIBABA_ROWS), "alibaba")
    a, b, c, d = trace.jobs
    assert a == TraceJob("pod-a", 0.0, 500.0, 1, None, "LS", cpus=12.0, memory_mib=16384)
    assert (b.gpu_fraction, b.gpu_model, b.gpu_models, b.queue) == (0.46, "T4", ("T4",), "BE")
    assert (c.num_gpus, c.gpu_fraction, c.gpu_model) == (8, None, None)
    assert c.gpu_models == ("V100M16", "V100M32") and c.duration == 1000.0
    assert (d.num_gpus, d.gpu_models, d.cpus, d.queue) == (0, (), 2.0, "Guaranteed")


def test_an_alibaba_pod_with_zero_lifetime_is_clamped_to_one_second_and_reported(
    tmp_path: Path,
) -> None:
    row = "pod-z,8000,30517,1,230,,BE,Pending,500,500,\n"
    trace = load_trace(write(tmp_path, ALIBABA + ALIBABA_ROWS + row), "alibaba")
    assert trace.jobs[-1].job_id == "pod-z" and trace.jobs[-1].duration == 1.0
    assert trace.adjusted == [
        BadRow(6, "pod pod-z: lifetime 0 s (deletion_time == creation_time) clamped to 1 s")
    ]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (
            "pod-x,1000,1,1,500,,LS,Running,500,400,",
            "deletion_time 400 is before creation_time 500",
        ),
        ("pod-x,1000,1,1,0,,LS,Running,1,2,", "gpu_milli 0 must be in 1..1000 for a one-GPU pod"),
        ("pod-x,1000,1,0,500,,LS,Running,1,2,", "gpu_milli 500 on a pod with num_gpu 0"),
        ("pod-x,1000,1,1,500,,LS,Running,1,,", "deletion_time is empty"),
        ("pod-a,1000,1,1,500,,LS,Running,1,2,", "duplicate job_id 'pod-a' (first on line 2)"),
    ],
)
def test_alibaba_bad_rows(tmp_path: Path, row: str, problem: str) -> None:
    path = write(tmp_path, ALIBABA + ALIBABA_ROWS + row + "\n", name="pods.csv")
    assert message(path, "alibaba") == f"pods.csv line 6: {problem}"


def test_real_alibaba_trace_has_8152_pods() -> None:
    trace = load_trace(real("alibaba-gpu-v2023/openb_pod_list_default.csv"), "alibaba")
    assert len(trace.jobs) == 8_152 and trace.skipped == []
    assert sum(j.gpu_fraction is not None for j in trace.jobs) == 3_078
    assert sum(j.num_gpus == 0 for j in trace.jobs) == 1_088
    assert [row.line for row in trace.adjusted] == [7287]  # openb-pod-7285, never scheduled


# ── itp ────────────────────────────────────────────────────────────────────


def make_tar(tmp_path: Path, members: dict[str, str]) -> Path:
    path = tmp_path / "raw-traces.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_itp_loads_an_extracted_csv_into_the_default_queue(tmp_path: Path) -> None:
    path = write(tmp_path, ITP + "u-1,16566,3890,4\nu-2,5010,1265,64\n")
    trace = load_trace(path, "itp")
    assert trace.jobs == [
        TraceJob("u-2", 0.0, 1265.0, 64),
        TraceJob("u-1", 11556.0, 3890.0, 4),
    ]


def test_itp_reads_a_member_straight_out_of_the_archive(tmp_path: Path) -> None:
    archive = make_tar(tmp_path, {"cluster01.csv": ITP + "x,5,600,1\n", "cluster02.csv": ITP})
    trace = load_trace(f"{archive}::cluster01.csv", "itp")
    assert trace.jobs == [TraceJob("x", 0.0, 600.0, 1)]
    assert list(tmp_path.iterdir()) == [archive]  # nothing extracted to disk


def test_errors_in_a_member_name_the_member(tmp_path: Path) -> None:
    archive = make_tar(tmp_path, {"cluster01.csv": ITP + "x,5,abc,1\n"})
    with pytest.raises(TraceError, match=r"^raw-traces.tar.gz::cluster01.csv line 2: duration"):
        load_trace(f"{archive}::cluster01.csv", "itp")


def test_a_missing_member_lists_the_members(tmp_path: Path) -> None:
    archive = make_tar(tmp_path, {"cluster01.csv": ITP, "cluster02.csv": ITP})
    text = message(Path(f"{archive}::cluster11.csv"), "itp")
    assert text == (
        "raw-traces.tar.gz::cluster11.csv: no member 'cluster11.csv' "
        "(members: cluster01.csv, cluster02.csv)"
    )


def test_an_archive_without_a_member_asks_for_one(tmp_path: Path) -> None:
    archive = make_tar(tmp_path, {"cluster01.csv": ITP})
    assert "name a member as 'raw-traces.tar.gz::NAME'" in message(archive, "itp")


def test_real_itp_cluster03_has_3011_jobs_and_all_clusters_69351() -> None:
    archive = real("itp-elasticflow/raw-traces.tar.gz")
    counts = {
        n: len(load_trace(f"{archive}::cluster{n:02d}.csv", "itp").jobs) for n in range(1, 11)
    }
    assert counts[3] == 3_011 and sum(counts.values()) == 69_351


# ── detection and gangs ────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("header", "fmt"),
    [(CANONICAL, "canonical"), (PHILLY, "philly"), (ALIBABA, "alibaba"), (ITP, "itp")],
)
def test_the_format_is_detected_from_the_header(tmp_path: Path, header: str, fmt: str) -> None:
    assert detect_format(write(tmp_path, header)) == fmt


def test_an_unknown_header_matches_no_format(tmp_path: Path) -> None:
    with pytest.raises(
        TraceError, match=r"^trace\.csv line 1: header a, b matches no trace format$"
    ):
        detect_format(write(tmp_path, "a,b\n1,2\n"))


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_node"), [(4, 1, 4), (8, 1, 8), (16, 2, 8), (12, 2, 6), (9, 2, 5)]
)
def test_as_gang_spreads_wide_jobs_over_whole_nodes(gpus: int, nodes: int, per_node: int) -> None:
    job = as_gang(TraceJob("j", 0.0, 1.0, gpus), gpus_per_node=8)
    assert (job.nodes, job.num_gpus) == (nodes, per_node)


def test_as_gang_leaves_gangs_alone_and_needs_a_node_size() -> None:
    gang = TraceJob("j", 0.0, 1.0, 16, nodes=2)
    assert as_gang(gang, 8) is gang
    with pytest.raises(ValueError, match="gpus_per_node must be at least 1"):
        as_gang(gang, 0)
