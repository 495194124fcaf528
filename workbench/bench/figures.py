"""The pictures a sweep is read by, as self-contained SVG (no plotting library).

    tradeoff_svg   per-user decode tok/s against total output tok/s, one point per
                   concurrency: the throughput/latency trade-off curve; client-bound
                   levels drawn hollow and red, partial ones dashed
    latency_svg    TTFT, TPOT and E2E percentiles (p50, p90, p99) as grouped bars,
                   one group per concurrency, one panel (own scale) per figure: E2E
                   contains TTFT, so stacking them would add up overlapping times
    sessions_svg   a session workload's turns: TTFT, prefix-cache hit rate and the context
                   reached against turn index, one line per configuration
    figures_html   all of them, in one HTML page; saved beside the JSON as <stem>-figures.html

The data come from `figure_rows`, which the Gradio tab's plots use too.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any, Protocol

from workbench.bench.config import BenchConfig
from workbench.bench.lag import ClientLag
from workbench.bench.summary import Summary


class FigureLevel(Protocol):
    """What a figure reads of one level (workbench.bench.results.BenchResult is one);
    a protocol, so results can draw its figures without a circle of imports."""

    @property
    def model(self) -> str: ...
    @property
    def config(self) -> BenchConfig: ...
    @property
    def summary(self) -> Summary: ...
    @property
    def client_lag(self) -> ClientLag | None: ...
    @property
    def partial(self) -> str | None: ...
    @property
    def client_bound(self) -> bool: ...
    @property
    def label(self) -> str: ...

__all__ = ["LATENCY_FIGURES", "PERCENTILE_NAMES", "SESSION_FIGURES", "figure_rows", "figures_html", "latency_rows",
           "latency_svg", "level_label", "session_rows", "sessions_svg", "tradeoff_svg"]

# (title, per-turn row key, scale): the session workload's panels.
SESSION_FIGURES = (("TTFT mean (ms)", "ttft_ms_mean", 1.0), ("prefix-cache hit rate (%)", "cache_hit_rate", 100.0),
                   ("context reached (tokens)", "context_tokens_max", 1.0))
_LINE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2")

LATENCY_FIGURES = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2E", "e2e_ms"))
PERCENTILE_NAMES = ("p50", "p90", "p99")
_BAR_COLORS = {"p50": "#4c78a8", "p90": "#f58518", "p99": "#b279a2"}
_POINT = "#4c78a8"
_BOUND = "#d62728"
_FONT = 'font-family="sans-serif" font-size="11"'


def figure_rows(levels: Sequence[FigureLevel]) -> list[dict[str, Any]]:
    """One row per level: the trade-off point and what marks it."""
    rows = []
    for r in sorted(levels, key=lambda r: r.config.concurrency):
        lag = r.client_lag
        rows.append({
            "concurrency": r.config.concurrency,
            "output_tok_s": r.summary.output_tok_s,
            "decode_tok_s_per_user": r.summary.decode_tok_s_per_user.mean,
            "client_bound": r.client_bound,
            "client_lag_p99_ms": None if lag is None else lag.p99_ms,
            "partial": r.partial is not None,
        })
    return rows


def level_label(row: dict[str, Any]) -> str:
    """A trade-off point's name: its concurrency, and why it is marked client-bound (lag, or the
    client's CPU alone when the window was too short to sample the lag)."""
    label = f"c={row['concurrency']}"
    if row["client_bound"]:
        lag = row["client_lag_p99_ms"]
        label += " client-bound" + ("" if lag is None else f" (lag p99 {lag:.0f} ms)")
    return label


def latency_rows(levels: Sequence[FigureLevel]) -> list[dict[str, Any]]:
    """One row per (figure, concurrency, percentile): the grouped bars."""
    rows = []
    for r in sorted(levels, key=lambda r: r.config.concurrency):
        for title, name in LATENCY_FIGURES:
            dist = getattr(r.summary, name)
            for q in PERCENTILE_NAMES:
                value = getattr(dist, q)
                if value is not None:
                    rows.append({"figure": title, "concurrency": r.config.concurrency, "percentile": q, "ms": value})
    return rows


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if m * step >= value:
            return float(m * step)
    return float(10 * step)


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _axis_ticks(top: float, n: int = 4) -> list[float]:
    return [top * i / n for i in range(n + 1)]


def tradeoff_svg(levels: Sequence[FigureLevel], width: int = 520, height: int = 340) -> str:
    rows = [r for r in figure_rows(levels) if r["output_tok_s"] is not None and r["decode_tok_s_per_user"] is not None]
    left, right, top, bottom = 64, 20, 34, 46
    pw, ph = width - left - right, height - top - bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="per-user decode tok/s against total output tok/s">',
           f'<text x="{width / 2}" y="18" text-anchor="middle" {_FONT} font-size="13">'
           "Throughput/latency trade-off: one point per concurrency</text>"]
    if not rows:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" {_FONT}>no successful requests</text>')
        return "\n".join(out + ["</svg>"])
    xmax = _nice_max(max(r["output_tok_s"] for r in rows) * 1.1)
    ymax = _nice_max(max(r["decode_tok_s_per_user"] for r in rows) * 1.1)

    def x(v: float) -> float:
        return left + pw * v / xmax

    def y(v: float) -> float:
        return top + ph - ph * v / ymax

    out += _axes(left, top, pw, ph, xmax, ymax, x, y,
                 "total output tok/s (all users)", "decode tok/s per user (mean)")
    if len(rows) > 1:
        points = " ".join(f"{x(r['output_tok_s']):.1f},{y(r['decode_tok_s_per_user']):.1f}" for r in rows)
        out.append(f'<polyline points="{points}" fill="none" stroke="{_POINT}" stroke-width="1.5"/>')
    for r in rows:
        cx, cy = x(r["output_tok_s"]), y(r["decode_tok_s_per_user"])
        color = _BOUND if r["client_bound"] else _POINT
        fill = "white" if r["client_bound"] else color
        dash = ' stroke-dasharray="2,2"' if r["partial"] else ""
        label = level_label(r)
        if r["partial"]:
            label += " partial"
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}" stroke="{color}" stroke-width="2"{dash}>'
                   f"<title>{html.escape(label)}: {_num(r['output_tok_s'])} tok/s total, "
                   f"{_num(r['decode_tok_s_per_user'])} tok/s per user</title></circle>")
        anchor = "end" if cx > left + pw * 0.7 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(f'<text x="{cx + dx:.1f}" y="{cy - 8:.1f}" text-anchor="{anchor}" {_FONT} fill="{color}">'
                   f"{html.escape(label)}</text>")
    return "\n".join(out + ["</svg>"])


def _axes(left: float, top: float, pw: float, ph: float, xmax: float, ymax: float,
          x: Any, y: Any, xlabel: str, ylabel: str) -> list[str]:
    out = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for t in _axis_ticks(xmax):
        out.append(f'<line x1="{x(t):.1f}" y1="{top + ph}" x2="{x(t):.1f}" y2="{top + ph + 4}" stroke="#999"/>')
        out.append(f'<text x="{x(t):.1f}" y="{top + ph + 16}" text-anchor="middle" {_FONT}>{_num(t)}</text>')
    for t in _axis_ticks(ymax):
        out.append(f'<line x1="{left}" y1="{y(t):.1f}" x2="{left + pw}" y2="{y(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end" {_FONT}>{_num(t)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 34}" text-anchor="middle" {_FONT}>{html.escape(xlabel)}</text>')
    out.append(f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" text-anchor="middle" {_FONT}>'
               f"{html.escape(ylabel)}</text>")
    return out


def latency_svg(levels: Sequence[FigureLevel], panel_width: int = 250, height: int = 300) -> str:
    rows = latency_rows(levels)
    concurrencies = sorted({r.config.concurrency for r in levels})
    bound = {r.config.concurrency for r in levels if r.client_bound}
    width = panel_width * len(LATENCY_FIGURES) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="latency percentiles, grouped bars">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" {_FONT} font-size="13">'
           "Latency percentiles (ms), grouped by concurrency; each panel has its own scale</text>"]
    for i, q in enumerate(PERCENTILE_NAMES):  # legend
        lx = width / 2 - 80 + i * 60
        out.append(f'<rect x="{lx}" y="24" width="10" height="10" fill="{_BAR_COLORS[q]}"/>'
                   f'<text x="{lx + 14}" y="33" {_FONT}>{q}</text>')
    left, top, bottom = 50, 50, 40
    ph = height - top - bottom
    for p, (title, _) in enumerate(LATENCY_FIGURES):
        x0 = 10 + p * panel_width + left
        pw = panel_width - left - 10
        values = [r["ms"] for r in rows if r["figure"] == title]
        out.append(f'<text x="{x0 + pw / 2}" y="{top - 4}" text-anchor="middle" {_FONT} font-weight="bold">{title}</text>')
        if not values:
            out.append(f'<text x="{x0 + pw / 2}" y="{top + ph / 2}" text-anchor="middle" {_FONT}>no data</text>')
            continue
        ymax = _nice_max(max(values) * 1.05)
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        for t in _axis_ticks(ymax):
            yy = top + ph - ph * t / ymax
            out.append(f'<line x1="{x0}" y1="{yy:.1f}" x2="{x0 + pw}" y2="{yy:.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 4}" y="{yy + 4:.1f}" text-anchor="end" {_FONT}>{_num(t)}</text>')
        group_w = pw / len(concurrencies)
        bar_w = group_w * 0.8 / len(PERCENTILE_NAMES)
        for g, c in enumerate(concurrencies):
            gx = x0 + g * group_w + group_w * 0.1
            for b, q in enumerate(PERCENTILE_NAMES):
                match = [r["ms"] for r in rows if r["figure"] == title and r["concurrency"] == c and r["percentile"] == q]
                if not match:
                    continue
                h = ph * match[0] / ymax
                out.append(f'<rect x="{gx + b * bar_w:.1f}" y="{top + ph - h:.1f}" width="{bar_w * 0.95:.1f}" '
                           f'height="{h:.1f}" fill="{_BAR_COLORS[q]}"><title>{title} {q} at concurrency {c}: '
                           f"{match[0]:,.1f} ms</title></rect>")
            color = _BOUND if c in bound else "#333"
            mark = "*" if c in bound else ""
            out.append(f'<text x="{gx + group_w * 0.4:.1f}" y="{top + ph + 14}" text-anchor="middle" {_FONT} '
                       f'fill="{color}">{c}{mark}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 30}" text-anchor="middle" {_FONT}>concurrency</text>')
    if bound:
        out.append(f'<text x="10" y="{height - 4}" {_FONT} fill="{_BOUND}">* client-bound: the load generator '
                   "lagged; these latencies include its own queueing</text>")
    return "\n".join(out + ["</svg>"])


def session_rows(levels: Sequence[FigureLevel]) -> list[dict[str, Any]]:
    """One row per (configuration, turn, figure) of the session workloads among `levels`."""
    rows = []
    labels = [r.label for r in levels]
    for i, r in enumerate(levels):
        name = r.label if labels.count(r.label) == 1 else f"{r.label} (run {i + 1})"
        for turn in r.summary.per_turn or []:
            for title, key, scale in SESSION_FIGURES:
                value = turn.get(key)
                if value is not None:
                    rows.append({"configuration": name, "turn": turn["turn"], "figure": title,
                                 "value": value * scale})
    return rows


def sessions_svg(levels: Sequence[FigureLevel], panel_width: int = 280, height: int = 280) -> str:
    rows = session_rows(levels)
    configs = list(dict.fromkeys(r["configuration"] for r in rows))
    width = panel_width * len(SESSION_FIGURES) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 16 * len(configs)}" '
           'role="img" aria-label="session workload by turn">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" {_FONT} font-size="13">'
           "Session workload by turn: one line per configuration</text>"]
    left, top, bottom = 56, 40, 40
    ph = height - top - bottom
    turns = sorted({r["turn"] for r in rows}) or [1]
    for p, (title, _, _) in enumerate(SESSION_FIGURES):
        x0 = 10 + p * panel_width + left
        pw = panel_width - left - 14
        values = [r["value"] for r in rows if r["figure"] == title]
        out.append(f'<text x="{x0 + pw / 2}" y="{top - 6}" text-anchor="middle" {_FONT} font-weight="bold">'
                   f"{html.escape(title)}</text>")
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        if not values:
            out.append(f'<text x="{x0 + pw / 2}" y="{top + ph / 2}" text-anchor="middle" {_FONT}>not reported</text>')
            continue
        ymax = 100.0 if "%" in title else _nice_max(max(values) * 1.05)
        span = max(turns[-1] - turns[0], 1)

        def x(turn: float) -> float:
            return x0 + pw * (turn - turns[0]) / span if len(turns) > 1 else x0 + pw / 2

        def y(v: float) -> float:
            return top + ph - ph * v / ymax

        for t in _axis_ticks(ymax):
            out.append(f'<line x1="{x0}" y1="{y(t):.1f}" x2="{x0 + pw}" y2="{y(t):.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 4}" y="{y(t) + 4:.1f}" text-anchor="end" {_FONT}>{_num(t)}</text>')
        for turn in turns:
            out.append(f'<text x="{x(turn):.1f}" y="{top + ph + 14}" text-anchor="middle" {_FONT}>{turn}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 30}" text-anchor="middle" {_FONT}>turn</text>')
        for i, config in enumerate(configs):
            color = _LINE_COLORS[i % len(_LINE_COLORS)]
            points = [(r["turn"], r["value"]) for r in rows if r["figure"] == title and r["configuration"] == config]
            if len(points) > 1:
                path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
                out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            for t, v in points:
                out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>'
                           f"{html.escape(config)}, turn {t}: {_num(v)}</title></circle>")
    for i, config in enumerate(configs):
        color = _LINE_COLORS[i % len(_LINE_COLORS)]
        ly = height + 12 * i + 4
        out.append(f'<rect x="20" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                   f'<text x="36" y="{ly + 1}" {_FONT}>{html.escape(config)}</text>')
    return "\n".join(out + ["</svg>"])


def figures_html(levels: Sequence[FigureLevel]) -> str:
    """Every figure in one self-contained page."""
    if not levels:
        return "<p>No benchmark levels to draw.</p>"
    first = levels[0]
    title = f"Benchmark of {first.model}: {first.config.input_tokens} in / {first.config.output_tokens} out"
    notes = [f"<li>concurrency {r.config.concurrency}: {html.escape(r.client_lag.describe())}</li>"
             for r in levels if r.client_lag is not None and r.client_bound]
    notes += [f"<li>concurrency {r.config.concurrency}: partial ({html.escape(r.partial)})</li>"
              for r in levels if r.partial is not None]
    return "\n".join([
        "<!doctype html>", '<html><head><meta charset="utf-8">', f"<title>{html.escape(title)}</title></head><body>",
        f'<h3 style="font-family:sans-serif">{html.escape(title)}</h3>',
        tradeoff_svg(levels), "<br>", latency_svg(levels),
        *(["<br>", sessions_svg(levels)] if session_rows(levels) else []),
        f'<ul style="font-family:sans-serif;font-size:12px">{"".join(notes)}</ul>' if notes else "",
        "</body></html>",
    ])
