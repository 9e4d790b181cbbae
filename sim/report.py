"""The simulation report: one self-contained HTML page with inline CSS and hand-drawn SVG charts.

Nothing is fetched when the page opens (no scripts, style sheets, fonts or images from anywhere), so it works from a
CI artifact, an e-mail attachment or a laptop on a plane. Long series are thinned so that a 60-day replay stays a
small file: each series keeps, per time bucket, its lowest and its highest sample, so peaks and troughs survive.
Floats are fine here: the numbers are drawn, never decided on.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from html import escape
from itertools import pairwise
from pathlib import Path

#: Paul Tol's "muted" scheme: nine colours told apart with every common colour-vision deficiency.
PALETTE = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
#: Beyond nine teams the colours repeat with these dash patterns, so no two series look the same.
DASHES = ("", "6 3", "2 2", "8 3 2 3")
PANEL_POINTS = 800
"""Points per series in a small-multiple panel (about two per horizontal pixel)."""
WIDE_POINTS = 1500
"""Points per series in a full-width chart."""
CDF_POINTS = 400

Point = tuple[float, float]


@dataclass
class ReportData:
    title: str
    teams: list[str]
    gpu_quota: dict[str, int]
    """Team → nominal GPUs (whole)."""
    samples: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    """(virtual ms, team → GPUs in use), ascending."""
    queue_depth: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    """(virtual ms, team → pending workloads), ascending."""
    waits_s: dict[str, list[float]] = field(default_factory=dict)
    """Team → wait in seconds of every admitted job."""
    summary: list[dict[str, object]] = field(default_factory=list)
    """Rows of the per-team table; columns in order of first appearance."""
    totals: dict[str, object] = field(default_factory=dict)
    """Run-wide figures (utilization, Jain's fairness, jobs, ...)."""
    kinds: list[dict[str, object]] = field(default_factory=list)
    """Rows of the per-kind table, drawn only when given (a trace of Jobs alone has nothing to break down)."""
    budgets: list[dict[str, object]] = field(default_factory=list)
    """Every budget in every window the run overlapped (quota.budgets.WindowSpending.as_dict()), drawn when the
    quota file has budgets."""
    nodes: dict[str, object] | None = None
    """Figures of a run on nodes (placement, fragmentation, failures); None: quota only, no nodes section."""
    fragmentation: list[tuple[int, float, int, int]] = field(default_factory=list)
    """(virtual ms, share of free GPUs on nodes not wholly free, racks wholly free, nodes down), ascending."""


def write_report(data: ReportData, directory: Path) -> Path:
    """Write `directory/report.html` (creating the directory) and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.html"
    path.write_text(render_report(data), encoding="utf-8")
    return path


def render_report(data: ReportData) -> str:
    """A complete HTML document."""
    styles = {team: _style(index) for index, team in enumerate(data.teams)}
    span = _time_span(data)
    sections = [
        _section("totals", "Run totals", "", _totals(data.totals)),
        _section(
            "usage",
            "GPUs in use per team",
            "Solid line and shading: GPUs admitted. Dashed line: the team's nominal quota; above it the team borrows "
            "from its cohort.",
            _usage_panels(data, styles, span),
        ),
        _section(
            "queue",
            "Queue depth",
            "Pending workloads per team, stacked. Where the series was thinned, each interval keeps its lowest and its "
            "highest moment.",
            _queue_chart(data, styles, span),
        ),
        _section(
            "waits",
            "Wait before admission",
            "Share of each team's admitted jobs that waited at most x (cumulative distribution, logarithmic time axis; "
            "waits under a second are drawn at 1 s).",
            _wait_chart(data, styles),
        ),
        _section("summary", "Per-team summary", "", _table(data.summary)),
    ]
    if data.kinds:
        sections.append(
            _section(
                "kinds",
                "Per-kind summary",
                "The per-team figures by kind of job; pods counts every pod of its gangs.",
                _table(data.kinds),
            )
        )
    if data.budgets:
        sections.append(_section("budgets", "Budget spending", BUDGET_NOTE, _table(_budget_rows(data.budgets))))
    if data.nodes is not None:
        sections.append(
            _section(
                "nodes",
                "Nodes: placement, fragmentation and failures",
                "Multi-node admissions are those whose pods went to more than one node; single-rack ones had all "
                "their nodes in one rack. Stranded: free GPUs on nodes that are not wholly free, which a whole-node "
                "pod cannot use. Lost to failures: at each NodeFailure eviction, GPUs × time since the last "
                "checkpoint.",
                _totals(data.nodes) + _fragmentation_panels(data, span),
            )
        )
    return _document(data.title, _subtitle(data, span), "\n".join(sections))


BUDGET_NOTE = (
    "Every budget in every window the run overlapped, in resource-hours (to the thousandth, rounded down), spending "
    "from before the run included; exhausted: when a review first found the budget spent, and new admissions were "
    "restricted from then to the window's end."
)
#: The budget table's columns (the JSON's exact milli-unit-milliseconds are left to --json).
BUDGET_COLUMNS = ("owner", "run", "scope", "resource", "label", "start", "end", "budget_hours", "spent_hours",
                  "remaining_hours", "exhausted_at")  # fmt: skip


def _budget_rows(rows: Sequence[Mapping[str, object]], run: str | None = None) -> list[dict[str, object]]:
    """The table's rows: the columns of BUDGET_COLUMNS in order (the window by its label), `run` when given."""
    names = {"label": "window"}
    return [
        {names.get(key, key): (run if key == "run" else row.get(key)) for key in BUDGET_COLUMNS if key != "run" or run}
        for row in rows
    ]


def write_comparison(
    title: str, rows: Sequence[Mapping[str, object]], baseline: ReportData, proposal: ReportData, directory: Path
) -> Path:
    """Write `directory/report.html`: two replays of the same jobs (`kuota whatif`) side by side."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.html"
    path.write_text(render_comparison(title, rows, baseline, proposal), encoding="utf-8")
    return path


def render_comparison(
    title: str, rows: Sequence[Mapping[str, object]], baseline: ReportData, proposal: ReportData
) -> str:
    """The comparison view: per team, a row for each run (now, new); then each run's totals, usage and waits, the
    baseline's first. Both runs share the time axis, so their charts line up."""
    teams = list(dict.fromkeys([*baseline.teams, *proposal.teams]))
    styles = {team: _style(index) for index, team in enumerate(teams)}
    spans = [_time_span(baseline), _time_span(proposal)]
    span = (min(s[0] for s in spans), max(s[1] for s in spans))
    sections = [
        _section(
            "comparison",
            "Per team: now and new",
            "now: the quota file in force; new: the proposal. Same jobs, same submission times and run times.",
            _table(rows),
        )
    ]
    if baseline.budgets or proposal.budgets:
        budget_rows = _budget_rows(baseline.budgets, "now") + _budget_rows(proposal.budgets, "new")
        # Each owner's windows in time order, the now row of a window above its new one.
        order = {team: index for index, team in enumerate(teams)}
        budget_rows.sort(
            key=lambda row: (order.get(str(row["owner"]), len(order)), str(row["start"]), row["run"] != "now")
        )
        sections.append(_section("budgets", "Budget spending: now and new", BUDGET_NOTE, _table(budget_rows)))
    for ident, label, data in (("now", "now", baseline), ("new", "new", proposal)):
        sections += [
            _section(f"{ident}-totals", f"{label}: run totals", data.title, _totals(data.totals)),
            _section(
                f"{ident}-usage",
                f"{label}: GPUs in use per team",
                "Solid line and shading: GPUs admitted. Dashed line: the team's nominal quota.",
                _usage_panels(data, styles, span),
            ),
            _section(
                f"{ident}-waits",
                f"{label}: wait before admission",
                "Share of each team's admitted jobs that waited at most x (logarithmic time axis).",
                _wait_chart(data, styles),
            ),
        ]
    subtitle = f"{len(teams)} teams; {_human_seconds((span[1] - span[0]) / 1000)} of replayed time"
    return _document(title, subtitle, "\n".join(sections), producer="kuota whatif")


# -- page ----------------------------------------------------------------------------------------------------------

_CSS = """
:root { --ink: #1d1d1f; --muted: #5f6368; --rule: #d9d9de; --grid: #ececf0; --bg: #ffffff; --panel: #fafafc; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1240px; padding: 24px 28px 48px; color: var(--ink); background: var(--bg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 6px; padding-top: 12px; border-top: 1px solid var(--rule); }
.sub, .note { color: var(--muted); margin: 0 0 12px; }
dl.totals { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 10px; margin: 0; }
dl.totals div { background: var(--panel); border: 1px solid var(--rule); border-radius: 6px; padding: 8px 12px; }
dl.totals dt { color: var(--muted); font-size: 12px; }
dl.totals dd { margin: 2px 0 0; font-size: 20px; font-variant-numeric: tabular-nums; }
figure.chart { margin: 0; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 14px; }
.panel { background: var(--panel); border: 1px solid var(--rule); border-radius: 6px; padding: 6px 8px 2px; }
.panel h3 { font-size: 13px; margin: 0; }
.panel h3 span { color: var(--muted); font-weight: normal; }
svg { display: block; width: 100%; height: auto; overflow: visible; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: var(--muted); }
svg .axis { stroke: #9a9aa2; stroke-width: 1; }
svg .grid { stroke: var(--grid); stroke-width: 1; }
svg .quota { stroke: var(--ink); stroke-width: 1.2; stroke-dasharray: 5 4; fill: none; }
svg .empty { font-size: 13px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 8px 0 0; padding: 0; list-style: none; }
.legend li { display: flex; align-items: center; gap: 6px; }
.legend svg { width: 28px; height: 12px; display: inline-block; }
.legend small { color: var(--muted); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--rule); text-align: left; white-space: nowrap; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; }
tbody tr:hover { background: var(--panel); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
@media print { body { max-width: none; } .panel, dl.totals div { break-inside: avoid; } }
"""


def _document(title: str, subtitle: str, body: str, producer: str = "kuota simulate") -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<header>\n<h1>{escape(title)}</h1>\n<p class="sub">{escape(subtitle)}</p>\n</header>\n'
        f"<main>\n{body}\n</main>\n"
        f"<footer>Produced by {escape(producer)}. All times are virtual: measured from the start of the replay."
        "</footer>\n"
        "</body>\n</html>\n"
    )


def _subtitle(data: ReportData, span: tuple[int, int]) -> str:
    quota = sum(data.gpu_quota.get(team, 0) for team in data.teams)
    teams = len(data.teams)
    return (
        f"{teams} team{'s' if teams != 1 else ''}, {quota:,} GPUs of nominal quota, "
        f"{_human_seconds((span[1] - span[0]) / 1000)} of virtual time"
    )


def _section(ident: str, heading: str, note: str, content: str) -> str:
    note_html = f'<p class="note">{escape(note)}</p>\n' if note else ""
    return f'<section id="{ident}">\n<h2>{escape(heading)}</h2>\n{note_html}{content}\n</section>'


def _totals(totals: Mapping[str, object]) -> str:
    if not totals:
        return '<p class="note">No totals were recorded.</p>'
    items = "".join(f"<div><dt>{escape(str(k))}</dt><dd>{escape(_format(v))}</dd></div>" for k, v in totals.items())
    return f'<dl class="totals">{items}</dl>'


def _table(rows: Sequence[Mapping[str, object]]) -> str:
    if not rows:
        return '<p class="note">No per-team figures were recorded.</p>'
    columns: list[str] = []
    for row in rows:
        columns += [str(key) for key in row if str(key) not in columns]
    numeric = {c for c in columns if _numeric_column([row.get(c) for row in rows])}
    head = "".join(f'<th scope="col"{_num(c in numeric)}>{escape(c)}</th>' for c in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td{_num(c in numeric)}>{escape(_format(row.get(c)))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _numeric_column(values: Sequence[object]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(_is_number(v) for v in present)


def _num(numeric: bool) -> str:
    return ' class="num"' if numeric else ""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | Decimal | Fraction) and not isinstance(value, bool)


def _format(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float | Decimal | Fraction):
        number = float(value)
        if not math.isfinite(number):
            return str(number)
        if number == int(number) and abs(number) < 1e15:
            return f"{int(number):,}"
        if abs(number) >= 1000:
            return f"{number:,.0f}"
        if abs(number) >= 10:
            return f"{number:,.1f}"
        return f"{number:.3g}"
    return str(value)


# -- series --------------------------------------------------------------------------------------------------------


def thin(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most `max_points` points: per time bucket, its lowest and highest point, in time order."""
    if len(points) <= max_points:
        return list(points)
    ranges = _buckets([p[0] for p in points], max_points)
    return [points[i] for i in _kept([p[1] for p in points], ranges)]


def _buckets(times: Sequence[float], max_points: int) -> list[range]:
    """Index ranges of equal time width, few enough that keeping two points of each stays within `max_points`."""
    count = len(times)
    if count <= max_points:
        return [range(i, i + 1) for i in range(count)]
    buckets = max(1, (max_points - 2) // 2)
    start, width = times[0], (times[-1] - times[0]) / buckets
    edges = [0, *(bisect_left(times, start + k * width) for k in range(1, buckets)), count]
    return [range(lo, hi) for lo, hi in pairwise(edges) if hi > lo]


def _kept(values: Sequence[float], ranges: Sequence[range]) -> list[int]:
    """Per range, the indices of its lowest and highest value (and always the first and the last index)."""
    if not ranges:
        return []
    kept = {ranges[0].start, ranges[-1].stop - 1}
    at = values.__getitem__
    for indices in ranges:
        # min/max with a key run the loop in C: a 60-day replay has hundreds of thousands of samples per team.
        kept.add(min(indices, key=at))
        kept.add(max(indices, key=at))
    return sorted(kept)


def _series(samples: Sequence[tuple[int, Mapping[str, int]]], teams: Sequence[str]) -> dict[str, list[float]]:
    return {team: [float(by_team.get(team, 0)) for _, by_team in samples] for team in teams}


def _time_span(data: ReportData) -> tuple[int, int]:
    times = [t for t, _ in data.samples] + [t for t, _ in data.queue_depth]
    if not times:
        return 0, 1
    start, stop = min(0, *times), max(times)
    return start, max(stop, start + 1)


@dataclass(frozen=True)
class _Style:
    colour: str
    dash: str


def _style(index: int) -> _Style:
    return _Style(PALETTE[index % len(PALETTE)], DASHES[(index // len(PALETTE)) % len(DASHES)])


# -- drawing -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Frame:
    """A plot area inside an SVG of `width` × `height`, with margins for the axes."""

    width: int
    height: int
    left: int = 48
    right: int = 12
    top: int = 10
    bottom: int = 36

    @property
    def x0(self) -> float:
        return float(self.left)

    @property
    def x1(self) -> float:
        return float(self.width - self.right)

    @property
    def y0(self) -> float:
        return float(self.height - self.bottom)

    @property
    def y1(self) -> float:
        return float(self.top)


@dataclass(frozen=True)
class _Scale:
    lo: float
    hi: float
    out_lo: float
    out_hi: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            value = math.log10(max(value, 10**self.lo)) if value > 0 else self.lo
        span = (self.hi - self.lo) or 1.0
        return self.out_lo + (value - self.lo) / span * (self.out_hi - self.out_lo)


def _n(value: float) -> str:
    """A coordinate with one decimal, without a trailing .0: most of the file's bytes are these."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _hline(cls: str, frame: _Frame, y: float) -> str:
    return f'<line class="{cls}" x1="{_n(frame.x0)}" x2="{_n(frame.x1)}" y1="{_n(y)}" y2="{_n(y)}"/>'


def _y_tick(frame: _Frame, y: float, text: str) -> list[str]:
    label = f'<text x="{_n(frame.x0 - 6)}" y="{_n(y)}" dy="0.32em" text-anchor="end">{escape(text)}</text>'
    return [_hline("grid", frame, y), label]


def _svg(frame: _Frame, label: str, content: Iterable[str]) -> str:
    return (
        f'<svg viewBox="0 0 {frame.width} {frame.height}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>" + "".join(content) + "</svg>"
    )


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    step = _nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9) * step
    count = int((hi - first) / step + 1e-9) + 1
    return [first + i * step for i in range(count)]


def _value_top(peak: float) -> float:
    """A round value above `peak`, so the highest line never touches the frame."""
    if peak <= 0:
        return 1.0
    step = _nice_step(peak, 4)
    return math.ceil(peak * 1.05 / step) * step


def _y_axis(frame: _Frame, scale: _Scale, label: str) -> list[str]:
    parts = []
    for tick in _ticks(scale.lo, scale.hi, 4):
        parts.append(_hline("grid", frame, scale(tick)))
        parts.append(
            f'<text x="{_n(frame.x0 - 6)}" y="{_n(scale(tick))}" dy="0.32em" text-anchor="end">{_format(tick)}</text>'
        )
    middle = _n((frame.y0 + frame.y1) / 2)
    parts.append(
        f'<text x="12" y="{middle}" text-anchor="middle" transform="rotate(-90 12 {middle})">{escape(label)}</text>'
    )
    return parts


def _time_axis(frame: _Frame, scale: _Scale) -> list[str]:
    unit_ms, unit = _time_unit(scale.hi - scale.lo)
    parts = [_hline("axis", frame, frame.y0)]
    for tick in _ticks(scale.lo / unit_ms, scale.hi / unit_ms, 6):
        x = _n(scale(tick * unit_ms))
        parts.append(f'<line class="axis" x1="{x}" x2="{x}" y1="{_n(frame.y0)}" y2="{_n(frame.y0 + 4)}"/>')
        parts.append(f'<text x="{x}" y="{_n(frame.y0 + 16)}" text-anchor="middle">{_format(tick)}</text>')
    centre = _n((frame.x0 + frame.x1) / 2)
    parts.append(f'<text x="{centre}" y="{frame.height - 3}" text-anchor="middle">virtual time ({unit})</text>')
    return parts


def _time_unit(span_ms: float) -> tuple[float, str]:
    hours = span_ms / 3_600_000
    if hours <= 3:
        return 60_000, "minutes"
    if hours <= 72:
        return 3_600_000, "hours"
    return 86_400_000, "days"


def _step_path(points: Sequence[Point], sx: _Scale, sy: _Scale) -> str:
    """A step line: each value holds until the next sample."""
    if not points:
        return ""
    parts = [f"M{_n(sx(points[0][0]))} {_n(sy(points[0][1]))}"]
    last_y = points[0][1]
    for t, v in points[1:]:
        parts.append(f"H{_n(sx(t))}")
        if v != last_y:
            parts.append(f"V{_n(sy(v))}")
            last_y = v
    return "".join(parts)


def _empty(frame: _Frame, message: str) -> str:
    x, y = _n((frame.x0 + frame.x1) / 2), _n((frame.y0 + frame.y1) / 2)
    return f'<text class="empty" x="{x}" y="{y}" text-anchor="middle">{escape(message)}</text>'


def _legend(entries: Iterable[tuple[str, _Style, str]]) -> str:
    items = []
    for label, style, detail in entries:
        dash = f' stroke-dasharray="{style.dash}"' if style.dash else ""
        sample = (
            f'<svg viewBox="0 0 28 12" aria-hidden="true"><line x1="1" x2="27" y1="6" y2="6" '
            f'stroke="{style.colour}" stroke-width="3"{dash}/></svg>'
        )
        small = f" <small>{escape(detail)}</small>" if detail else ""
        items.append(f"<li>{sample}<span>{escape(label)}{small}</span></li>")
    return f'<ul class="legend">{"".join(items)}</ul>'


# -- (a) GPUs in use, one panel per team ---------------------------------------------------------------------------


def _usage_panels(data: ReportData, styles: Mapping[str, _Style], span: tuple[int, int]) -> str:
    times = [float(t) for t, _ in data.samples]
    ranges = _buckets(times, PANEL_POINTS)
    panels = []
    for team, values in _series(data.samples, data.teams).items():
        series = [(times[i], values[i]) for i in _kept(values, ranges)]
        panels.append(_usage_panel(team, series, data.gpu_quota.get(team, 0), styles[team], span))
    return f'<figure class="chart" id="chart-usage">\n<div class="panels">\n{"".join(panels)}\n</div>\n</figure>'


def _usage_panel(team: str, series: Sequence[Point], quota: int, style: _Style, span: tuple[int, int]) -> str:
    peak = max((v for _, v in series), default=0.0)
    frame = _Frame(420, 180, left=46)
    sx = _Scale(span[0], span[1], frame.x0, frame.x1)
    sy = _Scale(0, _value_top(max(peak, quota)), frame.y0, frame.y1)
    parts = [*_y_axis(frame, sy, "GPUs"), *_time_axis(frame, sx)]
    if series:
        line = _step_path([*series, (float(span[1]), series[-1][1])], sx, sy)
        dash = f' stroke-dasharray="{style.dash}"' if style.dash else ""
        parts.append(f'<path d="{line}V{_n(frame.y0)}H{_n(sx(series[0][0]))}Z" fill="{style.colour}" opacity="0.18"/>')
        parts.append(f'<path d="{line}" fill="none" stroke="{style.colour}" stroke-width="1.6"{dash}/>')
    else:
        parts.append(_empty(frame, "no samples"))
    parts.append(_hline("quota", frame, sy(quota)))
    label = f"{team}: GPUs in use over time; nominal quota {quota:,} GPUs; peak {_format(peak)}"
    heading = f"{escape(team)} <span>quota {quota:,} · peak {_format(peak)} GPUs</span>"
    return f'<div class="panel"><h3>{heading}</h3>{_svg(frame, label, parts)}</div>\n'


def _fragmentation_panels(data: ReportData, span: tuple[int, int]) -> str:
    """Three small panels over time: stranded share of free GPUs (%), racks wholly free, nodes down."""
    times = [float(t) for t, *_ in data.fragmentation]
    ranges = _buckets(times, PANEL_POINTS)
    columns = (
        ("stranded free GPUs", "%", [100 * share for _, share, _, _ in data.fragmentation]),
        ("racks wholly free", "racks", [float(free) for _, _, free, _ in data.fragmentation]),
        ("nodes down", "nodes", [float(down) for *_, down in data.fragmentation]),
    )
    panels = []
    for index, (title, unit, values) in enumerate(columns):
        series = [(times[i], values[i]) for i in _kept(values, ranges)] if values else []
        peak = max(values, default=0.0)
        frame = _Frame(420, 180, left=46)
        sx = _Scale(span[0], span[1], frame.x0, frame.x1)
        sy = _Scale(0, _value_top(peak), frame.y0, frame.y1)
        parts = [*_y_axis(frame, sy, unit), *_time_axis(frame, sx)]
        if series:
            colour = PALETTE[index]
            line = _step_path([*series, (float(span[1]), series[-1][1])], sx, sy)
            parts.append(f'<path d="{line}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        else:
            parts.append(_empty(frame, "no samples"))
        heading = f"{escape(title)} <span>peak {_format(peak)}</span>"
        panels.append(f'<div class="panel"><h3>{heading}</h3>{_svg(frame, f"{title} over time", parts)}</div>\n')
    return f'<figure class="chart" id="chart-nodes">\n<div class="panels">\n{"".join(panels)}\n</div>\n</figure>'


# -- (b) queue depth, stacked ----------------------------------------------------------------------------------------


def _queue_chart(data: ReportData, styles: Mapping[str, _Style], span: tuple[int, int]) -> str:
    frame = _Frame(1100, 300, left=64)
    times = [float(t) for t, _ in data.queue_depth]
    series = _series(data.queue_depth, data.teams)
    totals = [float(sum(column)) for column in zip(*series.values(), strict=True)] if series else []
    kept = _kept(totals, _buckets(times, WIDE_POINTS)) if totals else []
    peak = max(totals, default=0.0)
    sx = _Scale(span[0], span[1], frame.x0, frame.x1)
    sy = _Scale(0, _value_top(peak), frame.y0, frame.y1)
    parts = [*_y_axis(frame, sy, "pending workloads"), *_time_axis(frame, sx)]
    if kept:
        thinned = {team: [values[i] for i in kept] for team, values in series.items()}
        parts += _stacked_areas([times[i] for i in kept], thinned, styles, sx, sy, frame, span[1])
    else:
        parts.append(_empty(frame, "no queue samples"))
    label = f"Pending workloads per team over time, stacked; peak {_format(peak)}"
    legend = _legend((team, styles[team], "") for team in data.teams)
    return f'<figure class="chart" id="chart-queue">\n{_svg(frame, label, parts)}\n{legend}\n</figure>'


def _stacked_areas(
    times: Sequence[float],
    series: Mapping[str, Sequence[float]],
    styles: Mapping[str, _Style],
    sx: _Scale,
    sy: _Scale,
    frame: _Frame,
    end: int,
) -> list[str]:
    # Each band is drawn as the area from the baseline up to its running total, the tallest first, so every band
    # needs one edge: half the bytes of drawing its upper and lower edges.
    running = [0.0] * len(times)
    edges: list[tuple[str, list[Point]]] = []
    for team, values in series.items():
        running = [r + v for r, v in zip(running, values, strict=True)]
        edges.append((team, list(zip(times, running, strict=True))))
    parts = []
    for team, edge in reversed(edges):
        line = _step_path([*edge, (float(end), edge[-1][1])], sx, sy)
        parts.append(f'<path d="{line}V{_n(frame.y0)}H{_n(sx(edge[0][0]))}Z" fill="{styles[team].colour}"/>')
    return parts


# -- (c) wait-time CDF ----------------------------------------------------------------------------------------------

_LOG_TICKS = (
    (1, "1s"),
    (10, "10s"),
    (60, "1m"),
    (600, "10m"),
    (3600, "1h"),
    (6 * 3600, "6h"),
    (86_400, "1d"),
    (7 * 86_400, "1w"),
    (30 * 86_400, "30d"),
    (365 * 86_400, "1y"),
)


def _wait_chart(data: ReportData, styles: Mapping[str, _Style]) -> str:
    frame = _Frame(1100, 320, left=64)
    waits = {team: sorted(max(0.0, float(w)) for w in data.waits_s.get(team, [])) for team in data.teams}
    longest = max((w[-1] for w in waits.values() if w), default=60.0)
    top = next((s for s, _ in _LOG_TICKS if s >= longest), _LOG_TICKS[-1][0])
    sx = _Scale(0.0, math.log10(max(top, 60)), frame.x0, frame.x1, log=True)
    sy = _Scale(0.0, 1.0, frame.y0, frame.y1)
    parts = _cdf_axes(frame, sx, sy, max(top, 60))
    for team, values in waits.items():
        if values:
            parts.append(_cdf_line(values, styles[team], sx, sy))
    if not any(waits.values()):
        parts.append(_empty(frame, "no admitted jobs"))
    legend = _legend((team, styles[team], _wait_stats(waits[team])) for team in data.teams)
    label = "Cumulative distribution of wait before admission per team, logarithmic time axis"
    return f'<figure class="chart" id="chart-waits">\n{_svg(frame, label, parts)}\n{legend}\n</figure>'


def _cdf_axes(frame: _Frame, sx: _Scale, sy: _Scale, top: float) -> list[str]:
    parts = []
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(_hline("grid", frame, sy(share)))
        parts.append(
            f'<text x="{_n(frame.x0 - 6)}" y="{_n(sy(share))}" dy="0.32em" text-anchor="end">{share:.0%}</text>'
        )
    parts.append(_hline("axis", frame, frame.y0))
    for seconds, text in _LOG_TICKS:
        if seconds > top:
            break
        x = _n(sx(seconds))
        parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{_n(frame.y1)}" y2="{_n(frame.y0)}"/>')
        parts.append(f'<text x="{x}" y="{_n(frame.y0 + 16)}" text-anchor="middle">{text}</text>')
    middle = _n((frame.y0 + frame.y1) / 2)
    parts.append(f'<text x="12" y="{middle}" text-anchor="middle" transform="rotate(-90 12 {middle})">jobs</text>')
    centre = _n((frame.x0 + frame.x1) / 2)
    parts.append(f'<text x="{centre}" y="{frame.height - 3}" text-anchor="middle">wait before admission</text>')
    return parts


def _cdf_line(values: Sequence[float], style: _Style, sx: _Scale, sy: _Scale) -> str:
    count = len(values)
    # Evenly spaced ranks keep the shape of the curve; the last rank is always drawn so the line reaches 100%.
    step = max(1, math.ceil(count / CDF_POINTS))
    ranks = sorted({*range(0, count, step), count - 1})
    points = [(values[0], 0.0)] + [(values[i], (i + 1) / count) for i in ranks]
    path = [f"M{_n(sx(points[0][0]))} {_n(sy(0.0))}"]
    for wait, share in points[1:]:
        path.append(f"H{_n(sx(wait))}V{_n(sy(share))}")
    dash = f' stroke-dasharray="{style.dash}"' if style.dash else ""
    return f'<path d="{"".join(path)}" fill="none" stroke="{style.colour}" stroke-width="1.8"{dash}/>'


def _wait_stats(values: Sequence[float]) -> str:
    if not values:
        return "no admitted jobs"
    median = values[(len(values) - 1) // 2]
    p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
    return f"median {_human_seconds(median)}, p90 {_human_seconds(p90)}, {len(values):,} jobs"


def _human_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"
