"""The experiment's one report: a self-contained HTML page (pictures inline as SVG, no network).

It says: the machine and vLLM version, each configuration's exact command and known
issues (or why it failed), each level's figures, the winners per concurrency (and, with a
quality pass, the fastest with no loss of quality), each configuration's quality beside its
speed (quality_report.py), where speculative decoding stops paying, the trade-off curve,
acceptance per category and per draft position, and carries the raw records as JSON.
`format_levels`, `format_winners` and `format_quality` are the same tables as text for the terminal.
"""

from __future__ import annotations

import html
import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from workbench.experiment.analysis import WINNER_METRICS, LevelFigures, Winner
from workbench.experiment.charts import bars_svg, lines_svg
from workbench.experiment.quality_report import LOSS_MARK, format_quality, quality_html, quality_sentences, winner_quality
from workbench.experiment.slo_report import slo_html

if TYPE_CHECKING:
    from workbench.experiment.results import ExperimentResult

__all__ = ["format_levels", "format_quality", "format_winners", "report_html"]


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


LEVEL_COLUMNS = ("configuration", "concurrency", "requests", "errors", "per-user decode tok/s", "total output tok/s",
                 "mean TTFT ms", "goodput req/s", "acceptance (responses)", "acceptance (/metrics)",
                 "mean acceptance length")


def _level_row(f: LevelFigures) -> list[str]:
    length = f.acceptance_length if f.acceptance_length is not None else f.acceptance_length_metrics
    return [f.label + (" (partial)" if f.partial else ""), str(f.concurrency), str(f.requests), str(f.errors),
            _f(f.decode_per_user_tps), _f(f.output_tps), _f(f.ttft_ms_mean), _f(f.goodput_req_s, 2),
            _pct(f.acceptance_rate), _pct(f.acceptance_rate_metrics), _f(length, 2)]


def _winner_row(w: Winner, lost: Collection[str] = ()) -> list[str]:
    title = WINNER_METRICS[w.metric][0]
    lead = "-" if w.lead is None else f"{w.lead:.2f}x over {w.runner_up}"
    return [str(w.concurrency), title, w.label + (LOSS_MARK if w.label in lost else ""), _f(w.value, 2), lead]


WINNER_COLUMNS = ("concurrency", "figure", "winner", "value", "lead")


def _winners_table(result: ExperimentResult) -> tuple[tuple[str, ...], list[list[str]]]:
    """The winners, a winner that lost quality flagged, and beside each the fastest that kept it."""
    ws = result.winners()
    extra_header, extra, lost = winner_quality(result, ws)
    return WINNER_COLUMNS + extra_header, [_winner_row(w, lost) + cells for w, cells in zip(ws, extra)]


def _text_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def format_levels(result: ExperimentResult) -> str:
    rows = [_level_row(f) for f in sorted(result.figures(), key=lambda f: (f.concurrency, f.label))]
    return _text_table(LEVEL_COLUMNS, rows)


def format_winners(result: ExperimentResult) -> str:
    table = _text_table(*_winners_table(result))
    notes = [x.summary for x in result.crossovers()]
    return table + ("\n" + "\n".join(notes) if notes else "")


def _table(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _configs_section(result: ExperimentResult) -> str:
    parts = []
    for c in result.configs:
        server = c.server or {}
        facts = [f"status: {c.status}"]
        if server.get("vllm_version"):
            facts.append(f"vLLM {server['vllm_version']}")
        if server.get("time_to_ready_s") is not None:
            facts.append(f"ready in {server['time_to_ready_s']:.0f} s")
        if c.note:
            facts.append(c.note)
        block = [f"<h3>{html.escape(c.label)}</h3><p>{html.escape(' · '.join(facts))}</p>"]
        if c.command:
            block.append(f"<pre>{html.escape(c.command)}</pre>")
        if c.diagnosis:
            block.append(f"<p class='bad'><b>Failed to launch:</b> {html.escape(str(c.diagnosis.get('summary')))}"
                         f"<br>{html.escape(str(c.diagnosis.get('fix') or ''))}</p>")
        issues = c.known_issues()
        if issues:
            items = "".join(f"<li><b>{html.escape(str(k.get('title')))}</b>. {html.escape(str(k.get('symptom') or ''))}"
                            f" <i>Change:</i> {html.escape(str(k.get('change') or ''))} "
                            f"<small>({html.escape(', '.join(k.get('sources') or []))})</small></li>" for k in issues)
            block.append(f"<p>Known issues this command meets upstream:</p><ul>{items}</ul>")
        elif c.plan is not None:
            block.append("<p>No known issues recorded for this command.</p>")
        parts.append("".join(block))
    return "".join(parts)


def _acceptance_section(figures: list[LevelFigures]) -> str:
    spec = [f for f in figures if f.speculative and f.partial is None]
    if not spec:
        return "<p>No configuration drafted tokens (no speculative decoding measured).</p>"
    out = []
    by_cat: dict[str, dict[str, float]] = {}
    for f in spec:
        for cat, rate in f.acceptance_by_category.items():
            by_cat.setdefault(cat, {})[f"{f.label} @ {f.concurrency}"] = rate
    if by_cat:
        out.append("<h3>Acceptance per category (from the responses)</h3>")
        out.append(bars_svg(by_cat, "draft acceptance rate", ymax=1.0))
        names = sorted({n for g in by_cat.values() for n in g})
        out.append(_table(["category", *names], [[cat, *(_pct(v.get(n)) for n in names)]
                                                 for cat, v in sorted(by_cat.items())]))
    rows = []
    for f in spec:
        resp = f.acceptance_by_position or []
        met = f.acceptance_by_position_metrics or []
        for i in range(max(len(resp), len(met))):
            rows.append([f.label, str(f.concurrency), str(i), _pct(resp[i] if i < len(resp) else None),
                         _pct(met[i] if i < len(met) else None)])
    if rows:
        out.append("<h3>Acceptance per draft position</h3><p>Share of verify steps whose draft was accepted up to "
                   "this position (position 0 = the first drafted token).</p>")
        out.append(_table(["configuration", "concurrency", "position", "from the responses", "from /metrics"], rows))
    dist_rows = []
    for f in spec:
        per_rate: dict[str, Any] = f.acceptance_rate_per_request or {}
        per_length: dict[str, Any] = f.acceptance_length_per_request or {}
        dist_rows.append([f.label, str(f.concurrency), str(per_rate.get("count", "-")),
                          _pct(per_rate.get("p50")), _pct(per_rate.get("min")), _pct(per_rate.get("max")),
                          _f(per_length.get("mean"), 2), _f(per_length.get("p50"), 2),
                          "-" if f.acceptance_agreement is None else f"{f.acceptance_agreement * 100:.2f} %"])
    out.append("<h3>Acceptance per request (the distribution)</h3>")
    out.append(_table(["configuration", "concurrency", "requests", "rate p50", "rate min", "rate max",
                       "acceptance length mean", "length p50", "responses vs /metrics"], dist_rows))
    return "".join(out)


def _curves(figures: list[LevelFigures]) -> str:
    def series(metric: str) -> dict[str, list[tuple[float, float, str]]]:
        out: dict[str, list[tuple[float, float, str]]] = {}
        for f in figures:
            value = getattr(f, metric)
            if value is not None and f.partial is None:
                out.setdefault(f.label, []).append((float(f.concurrency), float(value), f"c={f.concurrency}"))
        return out

    tradeoff: dict[str, list[tuple[float, float, str]]] = {}
    for f in sorted(figures, key=lambda f: f.concurrency):
        if f.output_tps is not None and f.decode_per_user_tps is not None and f.partial is None:
            tradeoff.setdefault(f.label, []).append((f.output_tps, f.decode_per_user_tps, f"c={f.concurrency}"))
    return ("<h3>The trade-off: per-user decode against total output (one point per concurrency)</h3>"
            + lines_svg(tradeoff, "total output tok/s", "per-user decode tok/s")
            + "<h3>Per-user decode tok/s by concurrency</h3>"
            + lines_svg(series("decode_per_user_tps"), "concurrency", "per-user decode tok/s", log_x=True)
            + "<h3>Mean TTFT by concurrency</h3>"
            + lines_svg(series("ttft_ms_mean"), "concurrency", "mean TTFT (ms)", log_x=True))


def _raw_json(result: ExperimentResult) -> str:
    raw = {c.label: [{"concurrency": r.config.concurrency, "server_counters":
                      None if r.server_counters is None else r.server_counters.to_dict(),
                      "records": [rec.to_dict() for rec in r.records]} for r in c.levels] for c in result.configs}
    return json.dumps(raw).replace("</", "<\\/")


_STYLE = """body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;word-break:break-all}
.bad{color:#a00}.answer{background:#eef6ee;padding:8px 12px;border-left:4px solid #54a24b}"""


def _no_answer(result: ExperimentResult) -> str:
    if not result.settings.concurrency:
        return "<li>No fixed concurrency levels: the SLO search above is the answer.</li>"
    return "<li>Not enough levels measured yet.</li>"


def report_html(result: ExperimentResult) -> str:
    figures = sorted(result.figures(), key=lambda f: (f.concurrency, f.label))
    m = result.machine
    machine = (f"{m.get('hardware')} ({', '.join(m.get('gpus') or []) or 'no NVIDIA GPU'}); CPU {m.get('cpu')}, "
               f"{m.get('cpu_cores')} cores, {m.get('memory_gb')} GiB memory; {m.get('platform')}")
    versions = sorted({str(c.server.get("vllm_version")) for c in result.configs if c.server.get("vllm_version")})
    s = result.settings
    status = result.status + (f": {result.partial}" if result.partial else "")
    levels_text = ", ".join(map(str, s.concurrency)) or "as the SLO search probed"
    answer = "".join(f"<li>{html.escape(x.summary)}</li>" for x in result.crossovers())
    per_user = [w for w in result.winners() if w.metric == "decode_per_user_tps"]
    answer += "".join(f"<li>Concurrency {w.concurrency}: {html.escape(w.label)} wins on per-user decode "
                      f"({_f(w.value)} tok/s{'' if w.lead is None else f', {w.lead:.2f}x'})</li>" for w in per_user)
    answer += "".join(f"<li>{html.escape(sentence)}</li>" for sentence in quality_sentences(result))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Experiment report</title>
<style>{_STYLE}</style></head><body>
<h1>Which configuration wins at which concurrency</h1>
<p>Status: <b>{html.escape(status)}</b> · started {html.escape(result.started_at)}</p>
<p>Machine (the client's): {html.escape(machine)}<br>vLLM: {html.escape(', '.join(versions) or 'unknown')}</p>
<p>Workload: {html.escape(result.workload.name)}, {len(result.workload.prompts)} prompts
({html.escape(', '.join(result.workload.categories))}); {s.output_tokens} output tokens per request (unless the
prompt sets its own), temperature {s.temperature:g}, concurrency {levels_text},
{s.warmup_requests} warm-up request(s) per level; every configuration and level sent the same prompts in the
same order.{'' if not s.goodput else ' Goodput SLOs: ' + html.escape(json.dumps(s.goodput)) + '.'}</p>
{slo_html(result)}
<div class="answer"><b>The answer</b><ul>{answer or _no_answer(result)}</ul></div>
<h2>Winners per concurrency</h2>{_table(*_winners_table(result))}
<h2>Quality beside speed</h2>{quality_html(result)}
<h2>Each level's figures</h2>{_table(LEVEL_COLUMNS, [_level_row(f) for f in figures])}
<h2>Curves</h2>{_curves(figures)}
<h2>Speculative decoding acceptance</h2>{_acceptance_section(figures)}
<h2>Configurations</h2>{_configs_section(result)}
<h2>Raw records</h2><p>Every measured request, as JSON (the script block below, id "raw-records").</p>
<script type="application/json" id="raw-records">{_raw_json(result)}</script>
</body></html>"""


def summary_rows(result: ExperimentResult) -> list[dict[str, Any]]:
    """One row per level (for the UI's table)."""
    return [dict(zip(LEVEL_COLUMNS, _level_row(f))) for f in sorted(result.figures(),
                                                                       key=lambda f: (f.concurrency, f.label))]
