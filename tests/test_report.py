"""The simulation report: a valid, self-contained HTML page with one chart per section, small on long replays."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sim.report import CDF_POINTS, PANEL_POINTS, WIDE_POINTS, ReportData, render_report, thin, write_report

TEAMS = ["nlp", "vision", "speech", "multimodal", "robotics", "recsys", "search", "ads", "eval", "infra"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """Checks nesting as it reads and remembers what the tests look at."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.sections: dict[str, list[str]] = {}
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._seen(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._seen(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def _seen(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "section":
            self.sections[attributes.get("id") or ""] = []
        section = next((s for s in reversed(self.sections)), None) if "section" in self.stack else None
        if section is not None:
            self.sections[section].append(tag if tag != "figure" else f"figure.{attributes.get('class')}")


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    assert page.problems == []
    assert page.stack == []
    assert page.doctype.lower() == "doctype html"
    return page


def synthetic(days: int = 60, step_s: int = 240, seed: int = 1) -> ReportData:
    """A long replay: usage and queue samples every `step_s` seconds of virtual time for every team."""
    rng = random.Random(seed)
    quota = dict(zip(TEAMS, [256, 96, 64, 64, 32, 64, 48, 16, 32, 16], strict=True))
    use = dict.fromkeys(TEAMS, 0)
    depth = dict.fromkeys(TEAMS, 0)
    samples: list[tuple[int, dict[str, int]]] = []
    queue: list[tuple[int, dict[str, int]]] = []
    for t in range(0, days * 86_400_000, step_s * 1000):
        team = rng.choice(TEAMS)
        use[team] = max(0, use[team] + rng.choice((-8, -1, 1, 8)))
        depth[team] = max(0, depth[team] + rng.choice((-1, 1)))
        samples.append((t, dict(use)))
        queue.append((t, dict(depth)))
    waits = {team: [rng.expovariate(1 / 3600) if rng.random() < 0.7 else 0.0 for _ in range(3000)] for team in TEAMS}
    summary: list[dict[str, object]] = [
        {"team": team, "quota GPUs": quota[team], "jobs": 3000, "mean wait (h)": 1.25, "utilization": 0.8125}
        for team in TEAMS
    ]
    totals: dict[str, object] = {"jobs": 30_000, "GPU utilization": 0.834, "Jain's fairness": 0.91, "preemptions": 12}
    return ReportData("60 days", list(TEAMS), quota, samples, queue, waits, summary, totals)


@pytest.fixture(scope="module")
def long_run() -> tuple[ReportData, str]:
    data = synthetic()
    return data, render_report(data)


def test_valid_html_with_one_chart_per_section(long_run: tuple[ReportData, str]) -> None:
    data, html = long_run
    page = parse(html)
    assert list(page.sections) == ["totals", "usage", "queue", "waits", "summary"]
    for section in ("usage", "queue", "waits"):
        assert page.sections[section].count("figure.chart") == 1, section
    # Small multiples: one panel per team inside the usage chart, one svg each in the others (legend swatches aside).
    assert page.sections["usage"].count("svg") == len(data.teams)
    assert page.sections["summary"].count("tr") == len(data.summary) + 1
    assert page.sections["totals"].count("dt") == len(data.totals)


def test_nothing_is_fetched_from_anywhere(long_run: tuple[ReportData, str]) -> None:
    _, html = long_run
    page = parse(html)
    assert not any(tag in ("script", "link", "img", "iframe", "object") for tag, _ in page.tags)
    for tag, attributes in page.tags:
        for name in ("src", "href", "xlink:href", "srcset"):
            assert name not in attributes, (tag, attributes)
    assert "http://" not in html and "https://" not in html
    assert "url(" not in html and "@import" not in html


def test_sixty_days_stays_small(long_run: tuple[ReportData, str]) -> None:
    data, html = long_run
    assert len(data.samples) == 21_600
    assert len(html.encode()) < 2_000_000
    # Every drawn series is thinned: a step path has an H command per point.
    points = [path.count("H") for path in re.findall(r'<path d="([^"]*)"', html)]
    assert max(points) <= max(PANEL_POINTS, WIDE_POINTS, CDF_POINTS) + 2


def test_quota_lines_axes_and_legend(long_run: tuple[ReportData, str]) -> None:
    data, html = long_run
    assert html.count('class="quota"') == len(data.teams)
    assert "virtual time (days)" in html
    assert "pending workloads" in html
    assert "wait before admission" in html
    assert html.count('class="legend"') == 2
    assert "median" in html and "p90" in html


def test_empty_run_still_renders() -> None:
    html = render_report(ReportData("nothing happened", ["nlp"], {"nlp": 8}))
    page = parse(html)
    assert "no samples" in html and "no queue samples" in html and "no admitted jobs" in html
    assert page.sections["usage"].count("figure.chart") == 1


def test_short_run_uses_minutes_and_hours() -> None:
    data = ReportData("short", ["nlp"], {"nlp": 8}, [(0, {"nlp": 2}), (3_600_000, {"nlp": 4})])
    assert "virtual time (minutes)" in render_report(data)
    data.samples.append((20 * 3_600_000, {"nlp": 0}))
    assert "virtual time (hours)" in render_report(data)


def test_text_is_escaped() -> None:
    data = ReportData(
        "<script>alert(1)</script>",
        ["a&b"],
        {"a&b": 1},
        summary=[{"team": "<b>x</b>", "value": None, "ok": True}],
        totals={"<i>": "</dd>"},
    )
    html = render_report(data)
    parse(html)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "a&amp;b" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<td>—</td>" in html and "<td>yes</td>" in html


def test_thin_keeps_peaks_and_troughs() -> None:
    points = [(float(t), 5.0) for t in range(100_000)]
    points[31_337] = (31_337.0, 900.0)
    points[77_000] = (77_000.0, -3.0)
    thinned = thin(points, 1000)
    assert len(thinned) <= 1000
    assert thinned[0] == points[0] and thinned[-1] == points[-1]
    assert (31_337.0, 900.0) in thinned and (77_000.0, -3.0) in thinned
    assert [p[0] for p in thinned] == sorted(p[0] for p in thinned)
    assert thin(points[:10], 1000) == points[:10]


def test_write_report_creates_the_directory(tmp_path: Path) -> None:
    path = write_report(ReportData("r", ["nlp"], {"nlp": 8}), tmp_path / "out" / "run1")
    assert path == tmp_path / "out" / "run1" / "report.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_per_kind_table_only_when_given() -> None:
    rows: list[dict[str, object]] = [{"kind": "JobSet", "jobs": 2, "pods": 8}, {"kind": "<Ray>", "jobs": 1, "pods": 3}]
    page = parse(html := render_report(ReportData("kinds", ["nlp"], {"nlp": 8}, summary=[{"team": "nlp"}], kinds=rows)))
    assert list(page.sections) == ["totals", "usage", "queue", "waits", "summary", "kinds"]
    assert page.sections["kinds"].count("tr") == 3 and "&lt;Ray&gt;" in html
    assert "kinds" not in parse(render_report(ReportData("jobs", ["nlp"], {"nlp": 8}))).sections
