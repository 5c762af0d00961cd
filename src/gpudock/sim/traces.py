"""Trace loaders: public GPU-cluster traces as one list of ``TraceJob``.

``load_trace(path, format)`` reads one CSV and returns a ``Trace``: the jobs
sorted by submission (ties keep file order), with submit times shifted so the
earliest kept job is at 0.0. It never writes anything and never guesses a
value it cannot read: a malformed row raises ``TraceError`` (file, 1-based line
where the header is line 1, problem), or with ``skip_bad_rows=True`` lands in
``Trace.skipped`` while the other rows load. Every row is validated, including
rows that ``start``/``end`` then filter out.

Formats (``FORMATS``; ``detect_format`` tells them apart by header):

- ``canonical``: gpudock's own; required ``job_id, submit_time, duration,
  num_gpus``; optional ``gpu_fraction, queue, priority, gpu_model,
  max_runtime, nodes, cpus, memory_mib, restart_overhead, checkpoint_interval,
  mig`` (an empty cell means "not set"; ``gpu_model`` may list alternatives as
  ``A|B``; ``restart_overhead`` and ``checkpoint_interval``, in seconds,
  override the run's for that job; ``mig`` is a MIG profile, with ``num_gpus``
  1). Other columns are ignored.
- ``philly``: Microsoft Philly 2017 as preprocessed by Pollux
  (``timestamp,duration,num_gpus,gpu_time,cluster``). ``timestamp`` is the
  wall-clock submission, ``cluster`` (the virtual cluster) becomes ``queue``,
  ``job_id`` is the 1-based data-row index. The file has no duration <= 0
  (shortest is 1 s), so none is tolerated: such a row is a bad row.
  ``start``/``end`` are dates or datetimes on the trace's own clock.
- ``alibaba``: Alibaba PAI 2023 pods (``openb_pod_list_*.csv``). ``qos`` ->
  ``queue``; ``cpu_milli/1000`` -> ``cpus``; one GPU with ``gpu_milli < 1000``
  -> ``gpu_fraction``; ``gpu_spec`` (``A|B``) -> ``gpu_models``.
  ``duration = deletion_time - creation_time``: the pod's lifetime, which is
  what FGD replays. Every pod has a deletion time; pods still ``Running`` at
  collection end carry the end of the collection (so their lifetime is
  censored), and the 897 ``Pending`` pods never ran upstream but are kept as
  the demand they were. Timestamps are whole seconds, so a lifetime of 0 means
  "under a second": it is clamped to 1 s and recorded in ``Trace.adjusted``
  (one pod in the default file). A negative lifetime is a bad row.
  ``scheduled_time`` and ``pod_phase`` are not used.
- ``itp``: Microsoft ITP 2021 (ElasticFlow raw traces,
  ``job_id,submission_time,duration,num_gpu``), one cluster per file; give an
  extracted CSV or ``raw-traces.tar.gz::cluster03.csv`` (read straight out of
  the archive). There is no VC or user column, so ``queue`` is ``default``.

Philly and ITP give a job's *total* GPUs, which may exceed a node (up to 128);
they load as ``nodes=1`` and ``as_gang`` spreads them over whole nodes.
"""

from __future__ import annotations

import csv
import io
import math
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from gpudock.core.mig import COMPUTE_SLICES, mig_request_problem, profile_syntax_problem

if TYPE_CHECKING:
    from _csv import Reader

Format = Literal["canonical", "philly", "alibaba", "itp"]
FORMATS: tuple[Format, ...] = ("canonical", "philly", "alibaba", "itp")
MEMBER_SEP = "::"  # "archive.tar.gz::member.csv"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, in seconds relative to the trace's first submission."""

    job_id: str
    submit_time: float  # >= 0; the earliest job of a Trace is at 0.0
    duration: float  # seconds the job runs when given its GPUs (> 0)
    num_gpus: int  # GPUs per node (0 = CPU-only); total GPUs = num_gpus * nodes
    gpu_fraction: float | None = None  # 0 < f <= 1: shares that fraction of each GPU
    queue: str = "default"
    priority: int = 0
    gpu_model: str | None = None  # set when exactly one model is acceptable
    max_runtime: float | None = None
    nodes: int = 1
    cpus: float | None = None
    memory_mib: int | None = None
    gpu_models: tuple[str, ...] = ()  # every acceptable model; () = any
    max_gpus: int | None = None  # elastic: num_gpus is the least, this the most (one node)
    elastic_restart: bool = False  # elastic: restart: a running job may be restarted to grow
    restart_overhead: float | None = None  # seconds each restart redoes; None: the run's
    checkpoint_interval: float | None = None  # it checkpoints this often; None: the run's
    mig: str | None = None  # one MIG device of this profile (then ``num_gpus`` is 1)

    @property
    def total_gpus(self) -> float:
        """GPU-equivalents the job holds while running (fractions count as such; a MIG
        device as its compute slices of 7)."""
        if self.mig is not None:
            return int(self.mig.split("g", 1)[0]) / COMPUTE_SLICES
        per_gpu = 1.0 if self.gpu_fraction is None else self.gpu_fraction
        return self.num_gpus * self.nodes * per_gpu


class TraceError(ValueError):
    """A trace that cannot be read; the message names file, line and problem."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        where = source if line is None else f"{source} line {line}"
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row that was skipped (or adjusted): its 1-based line and what was wrong."""

    line: int
    message: str


@dataclass(slots=True)
class Trace:
    """A loaded trace: jobs by (submit_time, file order), plus what did not load as-is.

    ``origin`` is the file-clock submit time that became 0.0 (for Philly,
    POSIX seconds of the timestamp read as UTC).
    """

    jobs: list[TraceJob]
    skipped: list[BadRow]
    source: str
    format: Format
    adjusted: list[BadRow] = field(default_factory=list)
    origin: float = 0.0


class _RowError(Exception):
    """One row's problem, raised by the row parsers and located by the driver."""


class _Row(NamedTuple):
    """A parsed row: ``TraceJob``'s fields in its order, then an adjustment note.

    ``submit_time`` is still on the file's own clock (Philly: POSIX seconds).
    A tuple, so that each frozen ``TraceJob`` is built once, after the shift.
    """

    job_id: str
    submit_time: float
    duration: float
    num_gpus: int
    gpu_fraction: float | None = None
    queue: str = "default"
    priority: int = 0
    gpu_model: str | None = None
    max_runtime: float | None = None
    nodes: int = 1
    cpus: float | None = None
    memory_mib: int | None = None
    gpu_models: tuple[str, ...] = ()
    note: str | None = None  # an adjustment, for Trace.adjusted
    restart_overhead: float | None = None
    checkpoint_interval: float | None = None
    mig: str | None = None

    def job(self, origin: float) -> TraceJob:
        return TraceJob(
            self.job_id,
            self.submit_time - origin,
            *self[2:13],
            restart_overhead=self.restart_overhead,
            checkpoint_interval=self.checkpoint_interval,
            mig=self.mig,
        )


_Parse = Callable[[list[str], dict[str, int], int], _Row]


# ── public entry points ───────────────────────────────────────────────────


def load_trace(
    path: str | os.PathLike[str],
    format: Format = "canonical",
    *,
    skip_bad_rows: bool = False,
    start: datetime | date | str | float | None = None,
    end: datetime | date | str | float | None = None,
) -> Trace:
    """Load ``path`` (or ``archive.tar.gz::member.csv``) as a ``format`` trace.

    Keeps jobs with ``start <= submit < end`` on the file's own clock: for
    ``philly`` a date, naive datetime or ISO string; for the other formats
    seconds. Raises ``TraceError`` for an unreadable, empty or header-less
    file, a missing required column, or (without ``skip_bad_rows``) the
    first malformed row; ``ValueError`` for a bad ``format``/``start``/``end``.
    """
    if format not in _PARSERS:
        raise ValueError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")
    parse = _PARSERS[format]
    lo, hi = _bound(start, format, "start"), _bound(end, format, "end")
    source, text = _read_text(path)
    reader = csv.reader(io.StringIO(text))
    columns = _header(reader, source, format)
    rows: list[_Row] = []
    trace = Trace([], [], str(path), format)
    first_line: dict[str, int] = {}
    index = 0
    for cells in reader:
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue  # a blank line is not a job
        index += 1
        line = reader.line_num
        try:
            if len(cells) != len(columns):
                raise _RowError(f"expected {len(columns)} fields, got {len(cells)}")
            row = parse(cells, columns, index)
            first = first_line.setdefault(row.job_id, line)
            if first != line:
                raise _RowError(f"duplicate job_id {row.job_id!r} (first on line {first})")
        except _RowError as problem:
            if not skip_bad_rows:
                raise TraceError(source, line, str(problem)) from None
            trace.skipped.append(BadRow(line, str(problem)))
            continue
        submit = row.submit_time
        if (lo is None or submit >= lo) and (hi is None or submit < hi):
            rows.append(row)
            if row.note is not None:
                trace.adjusted.append(BadRow(line, row.note))
    rows.sort(key=lambda r: r.submit_time)  # stable: ties keep file order
    trace.origin = rows[0].submit_time if rows else 0.0
    trace.jobs = [row.job(trace.origin) for row in rows]
    return trace


def detect_format(path: str | os.PathLike[str]) -> Format:
    """Tell the format of ``path`` from its header; ``TraceError`` if none fits."""
    source, text = _read_text(path)
    header = next(csv.reader(io.StringIO(text)), None)
    if not header:
        raise TraceError(source, None, "file is empty (no header line)")
    names = {name.strip() for name in header}
    for format in FORMATS:
        if names.issuperset(_ORDER[format]):
            return format
    raise TraceError(source, 1, f"header {', '.join(header)} matches no trace format")


def as_gang(job: TraceJob, gpus_per_node: int) -> TraceJob:
    """Spread a single-node job wider than ``gpus_per_node`` over whole nodes.

    ``n`` GPUs become ``ceil(n / gpus_per_node)`` nodes of ``ceil(n / nodes)``
    GPUs each (12 on 8-GPU nodes: 2 x 6; 128: 16 x 8); when ``n`` does not
    divide evenly the total rounds up by less than one GPU per node. Jobs
    that already fit, or already span nodes, are returned unchanged.
    """
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be at least 1, got {gpus_per_node}")
    if job.nodes != 1 or job.num_gpus <= gpus_per_node:
        return job
    nodes = -(-job.num_gpus // gpus_per_node)
    return replace(job, nodes=nodes, num_gpus=-(-job.num_gpus // nodes))


# ── reading ───────────────────────────────────────────────────────────────


def _read_text(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (display name, text) of a file or ``archive::member``; TraceError if unreadable."""
    archive, sep, member = os.fspath(path).partition(MEMBER_SEP)
    source = Path(archive).name + sep + member
    try:
        if sep or tarfile.is_tarfile(archive):
            data = _read_member(Path(archive), member, source)
        else:
            data = Path(archive).read_bytes()
    except FileNotFoundError:
        raise TraceError(source, None, f"no such file: {archive}") from None
    except IsADirectoryError:
        raise TraceError(source, None, f"is a directory: {archive}") from None
    except (OSError, tarfile.TarError) as exc:
        raise TraceError(source, None, f"cannot read {archive}: {exc}") from None
    try:
        return source, data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(source, None, f"is not UTF-8 text ({exc.reason})") from None


def _read_member(archive: Path, member: str, source: str) -> bytes:
    """The bytes of ``member`` of a tar archive, read in memory (nothing is extracted)."""
    with tarfile.open(archive) as tar:
        names = sorted(info.name for info in tar.getmembers() if info.isfile())
        if not member:
            problem = f"is a tar archive; name a member as '{source}::NAME'"
            raise TraceError(source, None, f"{problem} (members: {', '.join(names)})")
        if member not in names:
            raise TraceError(source, None, f"no member {member!r} (members: {', '.join(names)})")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file, checked above
        with handle:
            return handle.read()


def _header(reader: Reader, source: str, format: Format) -> dict[str, int]:
    """Read the header line into {column: index}; TraceError if empty or incomplete."""
    header = next(reader, None)
    need = ", ".join(_ORDER[format])
    if not header or not any(cell.strip() for cell in header):
        raise TraceError(source, None, f"file is empty (a {format} trace needs a header: {need})")
    columns = {name.strip(): index for index, name in enumerate(header)}
    missing = [name for name in _ORDER[format] if name not in columns]
    if missing:
        raise TraceError(
            source,
            reader.line_num,
            f"missing required column {', '.join(repr(name) for name in missing)} "
            f"(a {format} trace needs {need}; the header has {', '.join(header)})",
        )
    return columns


def _bound(value: datetime | date | str | float | None, format: Format, what: str) -> float | None:
    """``start``/``end`` on the file's clock: POSIX seconds for Philly, seconds otherwise."""
    if value is None:
        return None
    if format == "philly":
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"{what} {value!r} is not an ISO date or datetime") from None
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                raise ValueError(f"{what} must be naive: Philly timestamps carry no time zone")
            return _posix(value)
        if isinstance(value, date):
            return _posix(datetime(value.year, value.month, value.day))
        raise ValueError(f"{what} for a philly trace is a date or datetime, got {value!r}")
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} for a {format} trace is seconds, got {value!r}")
    return float(value)


def _posix(moment: datetime) -> float:
    """Seconds since 1970 of a naive datetime read as UTC."""
    return (moment - _EPOCH).total_seconds()


_EPOCH = datetime(1970, 1, 1)


# ── cell parsers (raise _RowError) ────────────────────────────────────────


def _number(text: str, column: str, floor: float | None = None) -> float:
    try:
        value = float(text)
    except ValueError:
        problem = "is empty" if not text.strip() else f"{text.strip()!r} is not a number"
        raise _RowError(f"{column} {problem}") from None
    if not math.isfinite(value):
        raise _RowError(f"{column} {text.strip()!r} is not a finite number")
    if floor is not None and value < floor:
        raise _RowError(f"{column} {text.strip()!r} must be at least {floor:g}")
    return value


def _whole(text: str, column: str, floor: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        number = _number(text, column)
        if not number.is_integer():
            raise _RowError(f"{column} {text.strip()!r} is not a whole number") from None
        value = int(number)
    if floor is not None and value < floor:
        raise _RowError(f"{column} {text.strip()!r} must be at least {floor}")
    return value


def _positive(text: str, column: str) -> float:
    value = _number(text, column)
    if value <= 0:
        raise _RowError(f"{column} {text.strip()!r} must be greater than 0")
    return value


def _text(text: str, column: str) -> str:
    value = text.strip()
    if not value:
        raise _RowError(f"{column} is empty")
    return value


def _optional(cells: list[str], columns: dict[str, int], name: str) -> str | None:
    """The stripped cell of an optional column; None when absent or empty."""
    index = columns.get(name)
    text = None if index is None else cells[index].strip()
    return text or None


def _models(spec: str | None) -> tuple[str, ...]:
    """``A|B`` -> ("A", "B"); empty or pandas' ``nan`` -> () (any model)."""
    if spec is None or spec.lower() == "nan":
        return ()
    return tuple(model.strip() for model in spec.split("|") if model.strip())


# ── per-format row parsers ────────────────────────────────────────────────


def _canonical(cells: list[str], c: dict[str, int], index: int) -> _Row:
    num_gpus = _whole(cells[c["num_gpus"]], "num_gpus", floor=0)
    fraction = None
    if (text := _optional(cells, c, "gpu_fraction")) is not None:
        fraction = _number(text, "gpu_fraction")
        if not 0 < fraction <= 1:
            raise _RowError(f"gpu_fraction {text!r} must be in (0, 1]")
        if num_gpus < 1:
            raise _RowError(f"gpu_fraction {text!r} needs num_gpus >= 1")
    opt = _optional
    models = _models(opt(cells, c, "gpu_model"))
    mig = opt(cells, c, "mig")
    if mig is not None:
        problem = profile_syntax_problem(mig) or mig_request_problem(mig, num_gpus, None)
        if problem is None and (num_gpus != 1 or fraction is not None):
            problem = f"mig {mig} holds one device: num_gpus 1 and no gpu_fraction"
        if problem is not None:
            raise _RowError(problem)
    return _Row(
        job_id=_text(cells[c["job_id"]], "job_id"),
        submit_time=_number(cells[c["submit_time"]], "submit_time", floor=0),
        duration=_positive(cells[c["duration"]], "duration"),
        num_gpus=num_gpus,
        gpu_fraction=fraction,
        queue=opt(cells, c, "queue") or "default",
        priority=_whole(t, "priority") if (t := opt(cells, c, "priority")) else 0,
        gpu_model=models[0] if len(models) == 1 else None,
        max_runtime=_positive(t, "max_runtime") if (t := opt(cells, c, "max_runtime")) else None,
        nodes=_whole(t, "nodes", floor=1) if (t := opt(cells, c, "nodes")) else 1,
        cpus=_number(t, "cpus", floor=0) if (t := opt(cells, c, "cpus")) else None,
        memory_mib=_whole(t, "memory_mib", floor=0) if (t := opt(cells, c, "memory_mib")) else None,
        gpu_models=models,
        restart_overhead=_number(t, "restart_overhead", floor=0)
        if (t := opt(cells, c, "restart_overhead"))
        else None,
        checkpoint_interval=_positive(t, "checkpoint_interval")
        if (t := opt(cells, c, "checkpoint_interval"))
        else None,
        mig=mig,
    )


def _philly(cells: list[str], c: dict[str, int], index: int) -> _Row:
    stamp = cells[c["timestamp"]].strip()
    try:
        submitted = datetime.fromisoformat(stamp)
    except ValueError:
        raise _RowError(f"timestamp {stamp!r} is not a 'YYYY-MM-DD HH:MM:SS' time") from None
    if submitted.tzinfo is not None:
        raise _RowError(f"timestamp {stamp!r} has a time zone; Philly timestamps have none")
    duration = _positive(cells[c["duration"]], "duration")
    num_gpus = _whole(cells[c["num_gpus"]], "num_gpus", floor=0)
    queue = _text(cells[c["cluster"]], "cluster")
    return _Row(str(index), (submitted - _EPOCH).total_seconds(), duration, num_gpus, None, queue)


def _alibaba(cells: list[str], c: dict[str, int], index: int) -> _Row:
    name = _text(cells[c["name"]], "name")
    created = _whole(cells[c["creation_time"]], "creation_time")
    deleted = _whole(cells[c["deletion_time"]], "deletion_time")
    if deleted < created:
        raise _RowError(f"deletion_time {deleted} is before creation_time {created}")
    num_gpus = _whole(cells[c["num_gpu"]], "num_gpu", floor=0)
    milli = _whole(cells[c["gpu_milli"]], "gpu_milli", floor=0)
    if num_gpus == 0 and milli != 0:
        raise _RowError(f"gpu_milli {milli} on a pod with num_gpu 0")
    if num_gpus == 1 and not 0 < milli <= 1000:
        raise _RowError(f"gpu_milli {milli} must be in 1..1000 for a one-GPU pod")
    models = _models(_optional(cells, c, "gpu_spec"))
    note = None
    if deleted == created:
        note = f"pod {name}: lifetime 0 s (deletion_time == creation_time) clamped to 1 s"
    return _Row(
        job_id=name,
        submit_time=float(created),
        duration=float(max(deleted - created, 1)),
        num_gpus=num_gpus,
        gpu_fraction=milli / 1000 if num_gpus == 1 and milli < 1000 else None,
        queue=_text(cells[c["qos"]], "qos"),
        gpu_model=models[0] if len(models) == 1 else None,
        cpus=_whole(cells[c["cpu_milli"]], "cpu_milli", floor=0) / 1000,
        memory_mib=_whole(cells[c["memory_mib"]], "memory_mib", floor=0),
        gpu_models=models,
        note=note,
    )


def _itp(cells: list[str], c: dict[str, int], index: int) -> _Row:
    return _Row(
        job_id=_text(cells[c["job_id"]], "job_id"),
        submit_time=_number(cells[c["submission_time"]], "submission_time", floor=0),
        duration=_positive(cells[c["duration"]], "duration"),
        num_gpus=_whole(cells[c["num_gpu"]], "num_gpu", floor=0),
    )


_ORDER: dict[Format, tuple[str, ...]] = {  # required columns
    "canonical": ("job_id", "submit_time", "duration", "num_gpus"),
    "philly": ("timestamp", "duration", "num_gpus", "cluster"),
    "alibaba": (
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "qos",
        "creation_time",
        "deletion_time",
    ),
    "itp": ("job_id", "submission_time", "duration", "num_gpu"),
}
_PARSERS: dict[Format, _Parse] = {
    "canonical": _canonical,
    "philly": _philly,
    "alibaba": _alibaba,
    "itp": _itp,
}
