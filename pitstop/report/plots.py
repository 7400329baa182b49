"""The report's pictures, drawn with matplotlib's Agg backend from ReportData (PNG bytes).

Figures are made with `matplotlib.figure.Figure` and an Agg canvas, never pyplot: no global
state, no display needed, safe in a worker or a test. Each picture has a fixed pixel size
(`*_size`), so that a report's layout is predictable and tests can check the PNG."""

from __future__ import annotations

import io
import textwrap
from datetime import datetime, timedelta

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import DateFormatter, date2num
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from pitstop.report.data import ReportData, most_telling
from pitstop.report.phases import PHASES
from pitstop.report.timeline import NodeRow
from pitstop.report.validation import Figure as ValidationFigure

DPI = 100
WIDTH_IN = 13.0
OUTCOME_COLOUR = {
    "ok": "#a1d99b",
    "changed": "#31a354",
    "failed": "#de2d26",
    "ignored": "#fd8d3c",
    "running": "#bdbdbd",
}
PHASE_HATCH = {
    "cordon": "//",
    "drain": "..",
    "update": "xx",
    "reboot": "\\\\",
    "validate": "++",
    "uncordon": "--",
    "other": "",
}
# Rows of the timeline and bars per metric drawn at most: every node that failed, then the
# earliest others (the data file and the tables have them all).
MAX_ROWS = 60
MAX_BARS = 60
REASON_WIDTH = 75
REASON_LINES = 3


def timeline_size(rows: int) -> tuple[int, int]:
    return int(WIDTH_IN * DPI), int((2.2 + 0.38 * max(rows, 1)) * DPI)


def availability_size(domains: int) -> tuple[int, int]:
    return int(WIDTH_IN * DPI), int((1.0 + 1.9 * max(domains, 1)) * DPI)


def validation_size(metrics: int) -> tuple[int, int]:
    return int(WIDTH_IN * DPI), int((0.8 + 3.6 * max(metrics, 1)) * DPI)


def _x(moment: datetime) -> float:
    """A time on the x axis (matplotlib's date numbers: days since its epoch)."""
    return float(date2num(moment))  # type: ignore[no-untyped-call]


def _days(delta: timedelta) -> float:
    return delta.total_seconds() / 86400


def _time_axis(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=DPI)
    return out.getvalue()


def _figure(size: tuple[int, int]) -> Figure:
    # Fixed size, laid out by matplotlib (no `bbox_inches="tight"`, which would change it).
    return Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")


def _span(data: ReportData) -> tuple[datetime, datetime]:
    end = max([data.ended_at, *(r.end for r in data.rows)])
    # A run that ended as it started (refused, plan failed) still gets an axis of some width.
    return data.started_at, max(end, data.started_at + timedelta(seconds=1))


def timeline_png(data: ReportData) -> bytes:
    """One row per node: its phases coloured by outcome, hatched by phase; stages, waves and
    gates as bands and lines; a failed node's row in red with its reason."""
    rows = timeline_rows(data)
    fig = _figure(timeline_size(len(rows)))
    ax = fig.add_subplot()
    start, end = _span(data)
    # Room on the right for the reasons of failed nodes, inside the axes.
    room = (end - start) * (0.45 if data.failed_rows else 0.04)
    ax.set_xlim(_x(start - (end - start) * 0.01), _x(end + room))
    ax.set_ylim(len(rows) - 0.4, -2.0)
    for y, row in enumerate(rows):
        for span in row.phases:
            ax.broken_barh(
                [(_x(span.start), _days(max(span.end - span.start, timedelta(milliseconds=300))))],
                (y - 0.35, 0.7),
                facecolors=OUTCOME_COLOUR[span.outcome],
                edgecolor="#444444",
                linewidth=0.4,
                hatch=PHASE_HATCH[span.phase],
            )
        if row.reason:
            ax.annotate(
                _wrapped(row.reason),
                xy=(_x(row.end), y),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
                linespacing=1.0,
                color=OUTCOME_COLOUR["failed"],
            )
    ax.set_yticks(range(len(rows)))
    labels = ax.set_yticklabels([_row_label(r.host, r.domain, r.wave) for r in rows], fontsize=8)
    for label, row in zip(labels, rows, strict=True):
        if row.reason:
            label.set_color(OUTCOME_COLOUR["failed"])
    _marks(ax, data)
    _time_axis(ax)
    shown = (
        ""
        if len(rows) == len(data.rows)
        else f"\n{len(rows)} of {len(data.rows)} nodes: those that failed first"
    )
    ax.set_title(
        f"{data.runbook}  {data.run_id}  ({data.status}{'' if data.finished else ', in progress'}){shown}"
    )
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=_legend(), loc="outside lower center", fontsize=7, ncols=len(_legend()), frameon=False)
    return _png(fig)


def timeline_rows(data: ReportData) -> list[NodeRow]:
    return most_telling(data.rows, lambda r: bool(r.reason), MAX_ROWS)


def _wrapped(reason: str) -> str:
    """A failed node's reason in at most REASON_LINES lines beside its row."""
    lines = textwrap.wrap(reason, REASON_WIDTH)
    if len(lines) > REASON_LINES:
        lines = [*lines[: REASON_LINES - 1], lines[REASON_LINES - 1][: REASON_WIDTH - 1] + "…"]
    return "\n".join(lines)


def _row_label(host: str, domain: str | None, wave: str | None) -> str:
    where = domain or wave
    return f"{host} ({where})" if where else host


def _marks(ax: Axes, data: ReportData) -> None:
    """Stages as labelled bands along the top; waves as dashed lines, their observe windows
    shaded; gates from opened to decided, with who decided."""
    for i, stage in enumerate(data.stages):
        ax.axvspan(
            _x(stage.start),
            _x(stage.end),
            ymin=0.0,
            ymax=1.0,
            color="#f0f0f0" if i % 2 else "#e8eef7",
            zorder=0,
        )
        ax.text(_x(stage.start), -1.65, f"stage {stage.name}", fontsize=8, fontweight="bold", va="center")
    for wave in data.waves:
        if wave.started_at is not None:
            ax.axvline(_x(wave.started_at), color="#3182bd", linestyle="--", linewidth=1)
            ax.text(
                _x(wave.started_at),
                -0.7,
                f" wave {wave.number} {wave.wave}",
                fontsize=7.5,
                color="#3182bd",
                va="center",
            )
        if wave.hosts_ended_at is not None and wave.observed_until is not None:
            ax.axvspan(
                _x(wave.hosts_ended_at), _x(wave.observed_until), color="#9ecae1", alpha=0.35, zorder=0
            )
    for gate in data.gates:
        closed = gate.closed_at or data.ended_at
        ax.axvspan(_x(gate.opened_at), _x(closed), color="#fee391", alpha=0.7, zorder=0)
        ax.axvline(_x(closed), color="#d95f0e", linewidth=1.2)
        who = ", ".join(v.approver for v in gate.votes if v.approve == (gate.status == "approved")) or "-"
        said = f" gate {gate.gate}: {gate.status}" + (f" by {who}" if gate.status != "open" else " (waiting)")
        ax.text(_x(closed), -1.15, said, fontsize=7.5, color="#d95f0e", va="center")


def _legend() -> list[Patch]:
    outcomes = [Patch(facecolor=c, edgecolor="#444444", label=o) for o, c in OUTCOME_COLOUR.items()]
    phases = [Patch(facecolor="white", edgecolor="#444444", hatch=PHASE_HATCH[p], label=p) for p in PHASES]
    spans = [
        Patch(facecolor="#fee391", label="gate open"),
        Patch(facecolor="#9ecae1", alpha=0.35, label="wave observed"),
    ]
    return [*outcomes, *phases, *spans]


def availability_png(data: ReportData) -> bytes:
    """Nodes out of service per failure domain over time, against the stage's limit."""
    series = data.availability
    fig = _figure(availability_size(len(series)))
    axes = fig.subplots(max(len(series), 1), 1, sharex=True, squeeze=False)[:, 0]
    start, end = _span(data)
    for ax, domain in zip(axes, series, strict=False):
        times = [_x(t) for t in (start, *(p.at for p in domain.points), end)]
        counts = [p.out for p in domain.points]
        heights = [0, *counts, counts[-1] if counts else 0]
        ax.step(times, heights, where="post", color="#3182bd")
        ax.fill_between(times, heights, step="post", alpha=0.25)
        top = max([domain.peak, *(lim.limit for lim in domain.limits), 1])
        for limit in domain.limits:
            ax.hlines(
                limit.limit, _x(limit.start), _x(limit.end), colors="#de2d26", linestyles="--", linewidth=1.4
            )
            ax.text(
                _x(limit.start),
                limit.limit + 0.08,
                f"max_unavailable_per_domain {limit.limit} ({limit.stage})",
                fontsize=7,
                color="#de2d26",
            )
        for wave in data.waves:
            if wave.started_at is not None:
                ax.axvline(_x(wave.started_at), color="#999999", linestyle=":", linewidth=0.8)
        ax.set_ylim(0, top + 0.8)
        # Whole nodes, a handful of ticks however many are out (a fleet's domain holds thousands).
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.set_ylabel("nodes out", fontsize=8)
        ax.set_title(f"failure domain {domain.domain}: peak {domain.peak}", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    _time_axis(axes[-1])
    axes[-1].set_xlim(_x(start), _x(end))
    return _png(fig)


def metrics(data: ReportData) -> list[str]:
    return sorted({f.metric for f in data.figures})


def validation_png(data: ReportData) -> bytes:
    """Each node's figure per metric: bars (green passed, red failed), the baseline and the
    lowest value it allows per node."""
    names = metrics(data)
    fig = _figure(validation_size(len(names)))
    axes = fig.subplots(max(len(names), 1), 1, squeeze=False)[:, 0]
    for ax, metric in zip(axes, names, strict=False):
        every = [f for f in data.figures if f.metric == metric]
        _validation_axes(ax, metric, most_telling(every, lambda f: not f.ok, MAX_BARS), len(every))
    return _png(fig)


def _validation_axes(ax: Axes, metric: str, figs: list[ValidationFigure], total: int) -> None:
    xs = range(len(figs))
    colours = [OUTCOME_COLOUR["changed"] if f.ok else OUTCOME_COLOUR["failed"] for f in figs]
    ax.bar(xs, [f.value for f in figs], color=colours, edgecolor="#444444", linewidth=0.4)
    for x, f in zip(xs, figs, strict=True):
        ax.text(x, f.value, f"{f.value:g}", ha="center", va="bottom", fontsize=7)
        if f.baseline is not None:
            ax.hlines(f.baseline, x - 0.45, x + 0.45, colors="black", linewidth=1.5)
        if f.floor is not None:
            ax.hlines(f.floor, x - 0.45, x + 0.45, colors="#de2d26", linestyles="--", linewidth=1.2)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{f.host}\n({f.stage})" for f in figs], fontsize=7, rotation=30, ha="right")
    unit = next((f.unit for f in figs if f.unit), "")
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric, fontsize=8)
    judged = [f for f in figs if f.baseline is not None]
    title = f"{metric} per node" + (
        f" ({len(figs)} of {total}: those that failed first)" if total > len(figs) else ""
    )
    if judged:
        first = judged[0]
        title += f" against baseline {first.baseline:g} {unit} (allowed -{first.allowed_pct:g}%)"
    else:
        # The pool had no baseline when the run first read it: the task's own limits judged.
        title += " (no baseline recorded for it yet: judged by the task's own limits)"
    ax.set_title(title, fontsize=9, loc="left")
    handles = [
        Patch(facecolor=OUTCOME_COLOUR["changed"], label="passed"),
        Patch(facecolor=OUTCOME_COLOUR["failed"], label="failed"),
    ]
    if judged:
        handles += [
            Patch(facecolor="black", label="baseline"),
            Patch(facecolor="#de2d26", label="lowest allowed"),
        ]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
