"""The SLO search shown: the answer first (each configuration's capacity, the winner, its lead),
then the probes; as text for the terminal, as HTML for the report, the Experiment tab and the
notebooks, with one picture per objective: each configuration's figure against the level, the
objective's line, and the level found ringed.

    format_slo(result)    the terminal's text (None without a search)
    slo_html(result)      the report's section ("" without a search)
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from workbench.experiment.charts import COLORS
from workbench.experiment.slo import Capacity, Probe, Slo, SloAnswer, SloSearch, Verdict

if TYPE_CHECKING:
    from workbench.experiment.results import ExperimentResult

__all__ = ["format_slo", "probe_rows", "slo_html", "slo_svg", "PROBE_COLUMNS"]

_FONT = 'font-family="sans-serif" font-size="11"'
PROBE_COLUMNS = ("configuration", "#", "load", "requests", "req/s", "verdict", "note")


def _value(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:,.1f}"


def _nice(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value` (an axis's top)."""
    power = 10.0 ** math.floor(math.log10(value))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value))


def probe_rows(result: ExperimentResult) -> tuple[list[str], list[list[str]]]:
    """The probes table: one row per probe, in the order run; a figure that missed its objective ends in *."""
    search = result.settings.search()
    if search is None:
        return list(PROBE_COLUMNS), []
    header = [*PROBE_COLUMNS[:4], *(f"{s.key} {s.unit} ({'>=' if s.at_least else '<='} {s.bound:g})"
                                    for s in search.slos), *PROBE_COLUMNS[4:]]
    rows = []
    for c in result.configs:
        for number, p in enumerate(c.probes, 1):
            requests = "-" if p.result is None else str(p.result.summary.requests)
            figures = [_value(p.figures.get(s.key)) + (" *" if s.key in p.missed else "") for s in search.slos]
            note = "; ".join(n for n in (p.note, "a level of the sweep, reused" if p.reused else None) if n)
            rows.append([c.label, str(number), p.load(), requests, *figures,
                         "-" if p.request_rate is None else f"{p.request_rate:.3g}", p.verdict.value, note])
    return header, rows


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def format_slo(result: ExperimentResult) -> str | None:
    """The answer first, then the probes (None when the experiment had no SLO search)."""
    search = result.settings.search()
    answer = result.slo_answer()
    if search is None or answer is None:
        return None
    lines = [search.describe()]
    lines += [f"  {c.sentence()}" for c in answer.capacities]
    if len(answer.capacities) > 1:
        lines.append(answer.sentence)
    header, rows = probe_rows(result)
    lines += ["", "Probes, in the order run (* = missed its objective; client-bound and partial probes are not "
              "used in the answer):", _text_table(header, rows)]
    return "\n".join(lines)


def _series(search: SloSearch, slo: Slo, probes: list[Probe]) -> list[tuple[float, float, Verdict]]:
    return sorted(((p.level, v, p.verdict) for p in probes if p.by == search.by
                   and (v := p.figures.get(slo.key)) is not None and p.verdict is not Verdict.PARTIAL),
                  key=lambda point: point[0])


def slo_svg(search: SloSearch, slo: Slo, probes: dict[str, list[Probe]], found: dict[str, float | None],
            width: int = 560, height: int = 320) -> str:
    """One objective: each configuration's figure per level probed, the objective's line, the found level ringed.
    Client-bound probes are drawn hollow (not trusted); a figure beyond the chart sits on its top edge."""
    series = {label: _series(search, slo, ps) for label, ps in probes.items()}
    points = [pt for s in series.values() for pt in s]
    if not points:
        return ""
    left, top, right, bottom = 60, 20, 130, 45
    pw, ph = width - left - right, height - top - bottom
    log_x = search.by == "concurrency" or max(pt[0] for pt in points) / min(pt[0] for pt in points) > 8
    xs = [math.log2(pt[0]) if log_x else pt[0] for pt in points]
    xmin, xmax = (min(xs), max(xs)) if log_x else (0.0, max(xs))
    if xmax <= xmin:
        xmax = xmin + 1
    finite = [pt[1] for pt in points if not math.isinf(pt[1])]
    ymax = _nice(max([slo.bound * 1.5, *(v for v in finite if v <= slo.bound * 4)]))

    def px(x: float) -> float:
        return left + ((math.log2(x) if log_x else x) - xmin) / (xmax - xmin) * pw

    def py(y: float) -> float:
        return top + ph - min(y, ymax) / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end" {_FONT}>{y:,.0f}</text>')
    for x in sorted({pt[0] for pt in points}):
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 15}" text-anchor="middle" {_FONT}>{x:g}</text>')
    x_title = "concurrency" if search.by == "concurrency" else "request rate (req/s)"
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle" {_FONT}>{x_title}</text>')
    y_title = html.escape(f"{slo.key} ({slo.unit})")
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 {top + ph / 2})" '
               f'{_FONT}>{y_title}</text>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(slo.bound):.1f}" y2="{py(slo.bound):.1f}" '
               f'stroke="#a00" stroke-dasharray="6 4"/>')
    out.append(f'<text x="{left + pw - 4}" y="{py(slo.bound) - 5:.1f}" text-anchor="end" {_FONT} fill="#a00">'
               f'{html.escape(slo.describe())}</text>')
    for n, (label, pts) in enumerate(series.items()):
        color = COLORS[n % len(COLORS)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y, verdict in pts:
            fill = "white" if verdict is Verdict.CLIENT_BOUND else color
            tip = html.escape(f"{label} at {x:g}: {_value(y)} {slo.unit}, {verdict.value}")
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{fill}" stroke="{color}">'
                       f'<title>{tip}</title></circle>')
        at = found.get(label)
        hit = next((pt for pt in pts if pt[0] == at), None)
        if hit is not None:
            out.append(f'<circle cx="{px(hit[0]):.1f}" cy="{py(hit[1]):.1f}" r="8" fill="none" stroke="{color}" '
                       f'stroke-width="2"/>')
            out.append(f'<text x="{px(hit[0]) + 10:.1f}" y="{py(hit[1]) + 14:.1f}" {_FONT} fill="{color}">'
                       f'{hit[0]:g}</text>')
        ly = top + 14 + n * 16
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{left + pw + 26}" y="{ly}" {_FONT}>{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _answer_items(answer: SloAnswer) -> str:
    items = "".join(f"<li>{html.escape(c.sentence())}</li>" for c in answer.capacities)
    if len(answer.capacities) > 1:
        items += f"<li><b>{html.escape(answer.sentence)}</b></li>"
    return items


def _found(capacities: list[Capacity]) -> dict[str, float | None]:
    return {c.label: c.level for c in capacities}


def slo_html(result: ExperimentResult) -> str:
    """The report's SLO section: the answer, one picture per objective, the probes ("" without a search)."""
    search = result.settings.search()
    answer = result.slo_answer()
    if search is None or answer is None:
        return ""
    probes = {c.label: c.probes for c in result.configs if c.probes}
    charts = "".join(f"<h3>{html.escape(s.describe())}</h3>" + slo_svg(search, s, probes, _found(answer.capacities))
                     for s in search.slos)
    header, rows = probe_rows(result)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in r) + "</tr>" for r in rows)
    return (f"<h2>How many users within the SLO</h2><p>{html.escape(search.describe())}</p>"
            f'<div class="answer"><b>The answer</b><ul>{_answer_items(answer)}</ul></div>'
            f"<h3>The probes, in the order run</h3><p>Each probe is a measured level (warm-up first). A figure "
            f"that missed its objective ends in *; a client-bound probe (the client's event loop lagged: its "
            f"latencies are the client's as much as the server's) and a partial one are kept here and left out of "
            f"the answer.</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{charts}")
