"""Line charts with one series per configuration, as self-contained SVG (no plotting library).

    lines_svg(series, x_title, y_title)   each series a list of (x, y, point label) points
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

__all__ = ["COLORS", "bars_svg", "lines_svg"]

COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2", "#9d755d", "#bab0ac")
_FONT = 'font-family="sans-serif" font-size="11"'
Point = tuple[float, float, str]


def _nice(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10 ** len(str(int(value))) / 10 if value >= 1 else 0.1
    for mult in (1, 2, 2.5, 5, 10):
        if value <= step * mult:
            return step * mult
    return value


def _num(v: float) -> str:
    if v == int(v) or v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if v >= 1 else f"{v:.2g}"


def lines_svg(series: Mapping[str, Sequence[Point]], x_title: str, y_title: str, *, log_x: bool = False,
              width: int = 560, height: int = 340) -> str:
    """One polyline per series, points labelled; axes from 0 (or log2 x for concurrency)."""
    left, top, right, bottom = 60, 20, 130, 45
    pw, ph = width - left - right, height - top - bottom
    points = [p for s in series.values() for p in s]
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60"><text x="10" y="30" {_FONT}>' \
               "no data yet</text></svg>"

    def fx(v: float) -> float:
        return math.log2(v) if log_x else v

    xs = [fx(p[0]) for p in points]
    xmin, xmax = (min(xs), max(xs)) if log_x else (0.0, _nice(max(xs)))
    if xmax == xmin:
        xmax = xmin + 1
    ymax = _nice(max(p[1] for p in points))

    def px(v: float) -> float:
        return left + (fx(v) - xmin) / (xmax - xmin) * pw

    def py(v: float) -> float:
        return top + ph - v / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end" {_FONT}>{_num(y)}</text>')
    ticks = sorted({p[0] for p in points}) if log_x else [xmax * i / 4 for i in range(5)]
    for x in ticks:
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 15}" text-anchor="middle" {_FONT}>{_num(x)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle" {_FONT}>{html.escape(x_title)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 {top + ph / 2})" '
               f'{_FONT}>{html.escape(y_title)}</text>')
    for n, (name, pts) in enumerate(series.items()):
        color = COLORS[n % len(COLORS)]
        ordered = sorted(pts, key=lambda p: p[0]) if log_x else list(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in ordered)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y, label in ordered:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}">'
                       f'<title>{html.escape(name)}: {html.escape(label)}</title></circle>')
            if label:
                out.append(f'<text x="{px(x) + 5:.1f}" y="{py(y) - 5:.1f}" {_FONT} fill="{color}">'
                           f'{html.escape(label)}</text>')
        ly = top + 14 + n * 16
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{left + pw + 26}" y="{ly}" {_FONT}>{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def bars_svg(groups: dict[str, dict[str, float]], y_title: str, *, width: int = 560, height: int = 260,
             ymax: float | None = None) -> str:
    """Grouped bars: groups (e.g. categories) along x, one bar per series inside each."""
    names = sorted({s for g in groups.values() for s in g})
    if not groups or not names:
        return ""
    left, top, bottom = 50, 15, 40
    pw, ph = width - left - 120, height - top - bottom
    top_value = ymax or _nice(max(v for g in groups.values() for v in g.values()))
    gw = pw / len(groups)
    bw = gw * 0.8 / len(names)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#999"/>',
           f'<text x="12" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 12 {top + ph / 2})" '
           f'{_FONT}>{html.escape(y_title)}</text>']
    for i in range(5):
        v = top_value * i / 4
        y = top + ph - v / top_value * ph
        out.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{_num(v)}</text>')
    for g, (group, values) in enumerate(groups.items()):
        gx = left + g * gw + gw * 0.1
        for n, name in enumerate(names):
            if name not in values:
                continue
            h = values[name] / top_value * ph
            out.append(f'<rect x="{gx + n * bw:.1f}" y="{top + ph - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
                       f'fill="{COLORS[n % len(COLORS)]}"><title>{html.escape(group)} · {html.escape(name)}: '
                       f'{values[name]:.3g}</title></rect>')
        out.append(f'<text x="{left + g * gw + gw / 2:.1f}" y="{top + ph + 15}" text-anchor="middle" {_FONT}>'
                   f'{html.escape(group)}</text>')
    for n, name in enumerate(names):
        ly = top + 10 + n * 16
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{COLORS[n % len(COLORS)]}"/>')
        out.append(f'<text x="{left + pw + 26}" y="{ly}" {_FONT}>{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)
