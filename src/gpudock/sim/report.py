"""The simulator's HTML report: four PNG plots and a self-contained index.html.

``write_report`` draws with matplotlib's object API on the Agg canvas
(``Figure`` + ``FigureCanvasAgg``): it never imports pyplot, never switches
the global backend and never needs a display. The figures themselves come
from ``metrics.py``; this module only draws and formats them. All text taken
from runs (policy, queue and description strings come from user files) is
HTML-escaped in the page and ``$``-escaped in plots (no accidental mathtext).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gpudock.sim.metrics import (
    compare,
    fairness_gap,
    jct_cdf,
    queue_delay_over_time,
    utilization_over_time,
)
from gpudock.sim.recommendation import best_deployable, recommend
from gpudock.sim.results import RunRecord
from gpudock.sim.ties import tied_with

__all__ = ["MAX_QUEUES_PLOTTED", "PLOTS", "recommend", "write_report"]

PLOTS = ("jct_cdf.png", "queue_delay.png", "utilization.png", "queue_share.png")
MAX_QUEUES_PLOTTED = 12
_TIME_BINS = 60
_LABEL_CHARS = 28

Color = tuple[float, float, float, float]


def write_report(
    runs: Sequence[RunRecord], out_dir: Path, *, title: str, trace: str, cluster: str
) -> Path:
    """Write ``index.html`` and the four ``PLOTS`` into ``out_dir``; return the page's path.

    Creates ``out_dir`` if needed and overwrites earlier report files there
    (so rerunning is idempotent); writes nothing else. The page links the
    PNGs relatively, so the folder can be moved or archived whole. Raises
    ValueError for no runs.
    """
    if not runs:
        raise ValueError("no runs to report")
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = compare(runs)
    colors = _policy_colors(runs)
    _plot_jct_cdf(runs, colors, out_dir / "jct_cdf.png")
    _plot_queue_delay(runs, colors, out_dir / "queue_delay.png")
    _plot_utilization(runs, colors, out_dir / "utilization.png")
    shown, total = _plot_queue_share(summaries, colors, out_dir / "queue_share.png")
    note = _queue_share_note(shown, total)
    page = _render_page(summaries, title=title, trace=trace, cluster=cluster, share_note=note)
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


# ---- plots ----------------------------------------------------------------


def _policy_colors(runs: Sequence[RunRecord]) -> dict[str, Color]:
    palette = colormaps["tab10"]
    return {run.policy: palette(i % 10) for i, run in enumerate(runs)}


def _label(text: str) -> str:
    """A user string made safe for a plot label: shortened, ``$`` not mathtext."""
    if len(text) > _LABEL_CHARS:
        text = text[: _LABEL_CHARS - 1] + "\u2026"
    return text.replace("$", r"\$")


def _run_label(run: RunRecord) -> str:
    return _label(run.policy) + (" (oracle)" if run.oracle else "")


def _new_axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(9, 4.8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _save(figure: Figure, axes: Axes, path: Path) -> None:
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    figure.savefig(path, format="png")


def _time_unit(span: float) -> tuple[float, str]:
    """A divisor and name that keep a time axis of ``span`` seconds readable."""
    for divisor, name in ((86400.0, "days"), (3600.0, "hours"), (60.0, "minutes")):
        if span >= 3 * divisor:
            return divisor, name
    return 1.0, "seconds"


def _plot_jct_cdf(runs: Sequence[RunRecord], colors: Mapping[str, Color], path: Path) -> None:
    figure, axes = _new_axes("JCT CDF", "job completion time (s, log scale)", "fraction of jobs")
    for run in runs:
        jcts, fractions = jct_cdf(run)
        points = [(x, y) for x, y in zip(jcts, fractions, strict=True) if x > 0]
        if not points:
            continue
        xs, ys = [points[0][0]] + [x for x, _ in points], [0.0] + [y for _, y in points]
        axes.step(
            xs,
            ys,
            where="post",
            color=colors[run.policy],
            linestyle="--" if run.oracle else "-",
            label=_run_label(run),
        )
    axes.set_xscale("log")
    axes.set_ylim(0, 1.02)
    _save(figure, axes, path)


def _plot_queue_delay(runs: Sequence[RunRecord], colors: Mapping[str, Color], path: Path) -> None:
    series = [(run, queue_delay_over_time(run, _TIME_BINS)) for run in runs]
    span = max((points[-1][0] for _, points in series if points), default=0.0)
    divisor, unit = _time_unit(span)
    figure, axes = _new_axes(
        "Average queue delay by submission time", f"submission time ({unit})", "queue delay (s)"
    )
    for run, points in series:
        known = [(t, d) for t, d in points if d is not None]  # empty slices: no point
        if not known:
            continue
        axes.plot(
            [t / divisor for t, _ in known],
            [d for _, d in known],
            color=colors[run.policy],
            linestyle="--" if run.oracle else "-",
            marker=".",
            label=_run_label(run),
        )
    _save(figure, axes, path)


def _plot_utilization(runs: Sequence[RunRecord], colors: Mapping[str, Color], path: Path) -> None:
    series = [(run, utilization_over_time(run, _TIME_BINS)) for run in runs]
    span = max((points[-1][0] for _, points in series if points), default=0.0)
    divisor, unit = _time_unit(span)
    figure, axes = _new_axes("GPU utilization", f"time ({unit})", "allocated / total GPUs")
    for run, points in series:
        if not points:
            continue
        axes.plot(
            [t / divisor for t, _ in points],
            [u for _, u in points],
            color=colors[run.policy],
            linestyle="--" if run.oracle else "-",
            label=_run_label(run),
        )
    axes.set_ylim(0, 1.05)
    _save(figure, axes, path)


def _queue_figures(summary: Mapping[str, object]) -> Mapping[str, Mapping[str, object]]:
    per_queue = summary.get("per_queue")
    if not isinstance(per_queue, Mapping):
        return {}
    return {str(q): f for q, f in per_queue.items() if isinstance(f, Mapping)}


def _fraction(figures: Mapping[str, object], key: str) -> float:
    value = figures.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _plot_queue_share(
    summaries: Sequence[Mapping[str, object]], colors: Mapping[str, Color], path: Path
) -> tuple[int, int]:
    """Grouped bars per queue; returns (queues shown, queues in all)."""
    entitled: dict[str, float] = {}
    weight: dict[str, float] = {}
    for summary in summaries:
        for queue, figures in _queue_figures(summary).items():
            entitled[queue] = max(entitled.get(queue, 0.0), _fraction(figures, "share_entitled"))
            weight[queue] = max(weight.get(queue, 0.0), entitled[queue])
            weight[queue] = max(weight[queue], _fraction(figures, "share_received"))
    queues = sorted(weight, key=lambda q: (-weight[q], q))[:MAX_QUEUES_PLOTTED]
    figure, axes = _new_axes("Share received vs. entitled", "queue", "fraction of the cluster")
    width = 0.8 / (len(summaries) + 1)
    positions = list(range(len(queues)))
    axes.bar(
        [p - 0.4 + width / 2 for p in positions],
        [entitled[q] for q in queues],
        width,
        color="lightgray",
        edgecolor="dimgray",
        hatch="//",
        label="entitled",
    )
    for i, summary in enumerate(summaries):
        figures = _queue_figures(summary)
        policy = str(summary.get("policy"))
        axes.bar(
            [p - 0.4 + width * (i + 1.5) for p in positions],
            [_fraction(figures.get(q, {}), "share_received") for q in queues],
            width,
            color=colors.get(policy),
            label=_label(policy) + (" (oracle)" if summary.get("oracle") is True else ""),
        )
    axes.set_xticks(positions, [_label(q) for q in queues], rotation=30, ha="right")
    if not queues:
        axes.text(0.5, 0.5, "no queues", ha="center", va="center", transform=axes.transAxes)
    _save(figure, axes, path)
    return len(queues), len(weight)


# ---- page -----------------------------------------------------------------

_FIGURE_LABELS = {
    "description": "Description",
    "oracle": "Oracle (reads true durations)",
    "jobs": "Finished jobs",
    "unfinished": "Unfinished jobs",
    "skipped_jobs": "Skipped jobs (could never run)",
    "avg_jct_s": "Average JCT (s)",
    "p50_jct_s": "p50 JCT (s)",
    "p99_jct_s": "p99 JCT (s)",
    "avg_queue_delay_s": "Average queue delay (s)",
    "makespan_s": "Makespan (s)",
    "gpu_utilization": "GPU utilization",
    "preemptions": "Preemptions",
    "preemptions_per_job": "Preemptions per job",
    "most_preemptions": "Most preemptions of one job",
    "lost_gpu_hours": "GPU-hours lost to restarts",
    "lost_gpu_share": "Share of GPU time lost to restarts",
    "restart_overhead_s": "Restart overhead assumed (s)",
    "checkpoint_interval_s": "Checkpoint interval assumed (s)",
    "cycles": "Scheduling cycles",
    "sim_seconds": "Simulation wall time (s)",
}
_QUEUE_COLUMNS = (
    ("jobs", "jobs"),
    ("avg_jct_s", "avg JCT (s)"),
    ("avg_queue_delay_s", "avg delay (s)"),
    ("share_received", "share"),
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { margin-bottom: 0.2rem; } .meta { color: #555; margin-top: 0; }
.recommendation { background: #eef6ee; border-left: 4px solid #3a3; padding: 0.8rem 1rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th.best { background: #dff0df; } td.text { text-align: left; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.9rem; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _cell(key: str, value: object) -> str:
    """One table cell's text, already escaped; None shows as an em dash."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and (
        key.startswith("share") or key in ("gpu_utilization", "lost_gpu_share")
    ):
        return f"{value:.1%}"
    if key in ("sim_seconds", "preemptions_per_job") and isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int | float):
        return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
    return _e(value)


def _policy_header(summary: Mapping[str, object], best: str | None) -> str:
    name = str(summary.get("policy"))
    oracle = " (oracle)" if summary.get("oracle") is True else ""
    css = ' class="best"' if name == best else ""
    return f"<th{css}>{_e(name)}{oracle}</th>"


def _summary_table(summaries: Sequence[Mapping[str, object]], best: str | None) -> str:
    head = "".join(_policy_header(s, best) for s in summaries)
    rows = [f"<tr><th>Figure</th>{head}</tr>"]
    for key, label in _FIGURE_LABELS.items():
        css = ' class="text"' if key == "description" else ""
        cells = "".join(f"<td{css}>{_cell(key, s.get(key))}</td>" for s in summaries)
        rows.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
    gaps = "".join(f"<td>{_cell('share', fairness_gap(s))}</td>" for s in summaries)
    rows.append(f"<tr><td>Fairness gap (max |received \u2212 entitled|)</td>{gaps}</tr>")
    return '<div class="scroll"><table>' + "".join(rows) + "</table></div>"


def _queue_table(summaries: Sequence[Mapping[str, object]]) -> str:
    per_policy = [_queue_figures(s) for s in summaries]
    queues = sorted({q for figures in per_policy for q in figures})
    if not queues:
        return "<p>No queues.</p>"
    span = len(_QUEUE_COLUMNS)
    top = "".join(f'<th colspan="{span}">{_e(s.get("policy"))}</th>' for s in summaries)
    sub = "".join(f"<th>{_e(label)}</th>" for _, label in _QUEUE_COLUMNS) * len(summaries)
    rows = [
        f'<tr><th rowspan="2">Queue</th><th rowspan="2">entitled</th>{top}</tr>',
        f"<tr>{sub}</tr>",
    ]
    for queue in queues:
        entitled = next((f[queue].get("share_entitled") for f in per_policy if queue in f), None)
        cells = [f"<td>{_e(queue)}</td><td>{_cell('share_entitled', entitled)}</td>"]
        for figures in per_policy:
            row = figures.get(queue, {})
            cells.extend(f"<td>{_cell(key, row.get(key))}</td>" for key, _ in _QUEUE_COLUMNS)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return '<div class="scroll"><table>' + "".join(rows) + "</table></div>"


def _queue_share_note(shown: int, total: int) -> str:
    if shown < total:
        return f" Showing the top {shown} of {total} queues by entitlement or share received."
    return ""


def _figure(src: str, alt: str, caption: str) -> str:
    return (
        f'<figure><img src="{_e(src)}" alt="{_e(alt)}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


_CAPTIONS = (
    (
        "jct_cdf.png",
        "JCT CDF",
        "Job completion time CDF per policy (log x). The y-axis counts all replayed jobs, so a "
        "curve that stops below 1 has unfinished jobs. Oracles (dashed) read true durations "
        "and are reference bounds, not deployable.",
    ),
    (
        "queue_delay.png",
        "Queue delay over time",
        "Average queue delay of the jobs submitted in each time slice (jobs that never started "
        "are left out; they are counted as unfinished). Slices where no job started have no "
        "point.",
    ),
    (
        "utilization.png",
        "GPU utilization over time",
        "Allocated GPUs divided by total GPUs, averaged per time slice, from the first "
        "submission to the last completion.",
    ),
    (
        "queue_share.png",
        "Queue share received vs entitled",
        "Each queue's time-averaged share of the cluster's GPUs per policy (colored) against "
        "its entitlement (hatched), from the first submission to the last completion.",
    ),
)


def _render_page(
    summaries: Sequence[Mapping[str, object]],
    *,
    title: str,
    trace: str,
    cluster: str,
    share_note: str,
) -> str:
    best = best_deployable(summaries)
    rivals = [s for s in summaries if s.get("oracle") is not True and s is not best]
    if best is not None and tied_with(best, rivals):  # a tie: no column is marked best
        best = None
    best_name = None if best is None else str(best.get("policy"))
    figures = "".join(
        _figure(src, alt, caption + (share_note if src == "queue_share.png" else ""))
        for src, alt, caption in _CAPTIONS
    )
    notes = (
        "JCT = completion minus submission, over finished jobs. Percentiles are nearest-rank. "
        "Queue delay = first start minus submission, over jobs that started. Utilization and "
        "shares are time-averages over [first submission, last completion]. Fairness gap = "
        "the largest |share received \u2212 share entitled| over the queues, as a fraction of "
        "the cluster (lower is fairer)."
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<p class="meta">Trace: {_e(trace)} \u00b7 Cluster: {_e(cluster)} \u00b7 '
        f"{len(summaries)} policies</p>"
        f'<h2>Recommendation</h2><p class="recommendation">{_e(recommend(summaries))}</p>'
        f"<h2>Policies side by side</h2>{_summary_table(summaries, best_name)}"
        f"<h2>Per queue</h2>{_queue_table(summaries)}"
        f"<h2>Plots</h2>{figures}"
        f'<h2>Definitions</h2><p class="meta">{_e(notes)}</p>'
        "</body></html>\n"
    )
