"""Quality beside speed, as the report and the terminal show it.

    format_quality(result)        the terminal's table and one sentence per configuration
    quality_html(result)          the report's section: the same table with the speed beside
                                  it, accuracy per item kind, each prompt's common prefix, problems
    winner_quality(result, ws)    the winners table's extra column, "fastest with no loss of
                                  quality", and the labels to flag (their quality was lost)
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workbench.experiment.analysis import Winner
from workbench.experiment.quality import QualityRow, Verdict

if TYPE_CHECKING:
    from workbench.experiment.results import ExperimentResult

__all__ = ["LOSS_MARK", "NO_LOSS_COLUMN", "QUALITY_COLUMNS", "format_quality", "quality_html", "quality_sentences",
           "winner_quality"]

NO_LOSS_COLUMN = "fastest with no loss of quality"
LOSS_MARK = " (quality loss)"
QUALITY_COLUMNS = ("configuration", "agreement with the reference (temperature 0)", "accuracy (95 % interval, n)",
                   "quality")
_VERDICT_TEXT = {Verdict.REFERENCE: "reference", Verdict.NO_LOSS: "no loss", Verdict.BETTER: "better",
                 Verdict.LOSS: "LOSS (flagged)", Verdict.UNKNOWN: "not judged"}


def _row(r: QualityRow) -> list[str]:
    return [r.label, r.agreement_text(), r.accuracy_text(), _VERDICT_TEXT[r.verdict]]


def _text_table(header: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _reference(rows: Sequence[QualityRow]) -> QualityRow | None:
    return next((r for r in rows if r.is_reference), None)


def _problems(result: ExperimentResult) -> list[str]:
    out = []
    for c in result.configs:
        for p in (c.quality.problems if c.quality else []):
            out.append(f"{c.label} ({p.part}): {p.message}" + (f" {p.hint}" if p.hint else ""))
    return out


def _speed_against(result: ExperimentResult, label: str, reference: str) -> str:
    """"per-user decode 1.21x off's at concurrency 1, 0.95x at 4" from the levels both measured."""
    mine = {f.concurrency: f.decode_per_user_tps for f in result.figures() if f.label == label and f.partial is None}
    theirs = {f.concurrency: f.decode_per_user_tps for f in result.figures()
              if f.label == reference and f.partial is None}
    ratios = [(n, v / t) for n, v in sorted(mine.items()) if v and (t := theirs.get(n))]
    if not ratios:
        return ""
    return f"per-user decode {ratios[0][1]:.2f}x {reference}'s at concurrency {ratios[0][0]}" + "".join(
        f", {r:.2f}x at {n}" for n, r in ratios[1:])


def quality_sentences(result: ExperimentResult) -> list[str]:
    """One sentence per checked configuration: its speed and answers against the reference's, and the verdict."""
    rows = result.quality_rows()
    ref = _reference(rows)
    return [r.summary(None if ref is None else ref.accuracy, _speed_against(result, r.label, r.reference))
            for r in rows]


def format_quality(result: ExperimentResult) -> str:
    """The terminal's quality table (empty when no configuration was checked)."""
    rows = result.quality_rows()
    if not rows:
        return ""
    q = result.settings.quality
    head = (f"Quality ({q.mode}): agreement with {rows[0].reference} at temperature 0; accuracy on "
            f"{next((r.accuracy.task for r in rows if r.accuracy), q.task)} through lm-eval")
    lines = [head, _text_table(QUALITY_COLUMNS, [_row(r) for r in rows]), *quality_sentences(result)]
    lines += [f"quality problem: {p}" for p in _problems(result)]
    return "\n".join(lines)


def winner_quality(result: ExperimentResult, ws: Sequence[Winner]) -> tuple[tuple[str, ...], list[list[str]], set[str]]:
    """(extra header, extra cells per winner row, labels that lost quality). Nothing extra
    when no accuracy was measured to judge by."""
    rows = result.quality_rows()
    kept = result.no_loss_winners()
    if not kept:
        return (), [[] for _ in ws], set()
    by_key = {(w.concurrency, w.metric): w for w in kept}
    cells = []
    for w in ws:
        best = by_key.get((w.concurrency, w.metric))
        cells.append(["-" if best is None else f"{best.label} ({best.value:,.2f})"])
    return (NO_LOSS_COLUMN,), cells, {r.label for r in rows if r.verdict is Verdict.LOSS}


def _speed(result: ExperimentResult, label: str) -> str:
    figures = sorted((f for f in result.figures() if f.label == label and f.decode_per_user_tps is not None),
                     key=lambda f: f.concurrency)
    return ", ".join(f"c={f.concurrency}: {f.decode_per_user_tps:,.1f}" for f in figures) or "-"


def _table(header: Sequence[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def quality_html(result: ExperimentResult) -> str:
    """The report's quality section."""
    rows = result.quality_rows()
    q = result.settings.quality
    if not q.on:
        return "<p>No quality pass (quality off): speed only.</p>"
    if not rows:
        return "<p>No configuration has been checked yet.</p>"
    ref = rows[0].reference
    out = [f"<p>After each configuration's sweep, on the same server: its answers to the first workload prompts at "
           f"temperature 0, one at a time, compared token by token with {html.escape(ref)}'s (the reference); and "
           f"the task {html.escape(q.task)} through lm-eval (EleutherAI's evaluation harness, its "
           f"local-chat-completions model). A configuration whose accuracy interval lies wholly below the "
           f"reference's is flagged, and not crowned in the winners.</p>"]
    table = [[r.label, _speed(result, r.label), *_row(r)[1:]] for r in rows]
    out.append(_table([QUALITY_COLUMNS[0], "per-user decode tok/s", *QUALITY_COLUMNS[1:]], table))
    out.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in quality_sentences(result)) + "</ul>")
    kinds = sorted({k for r in rows if r.accuracy for k in r.accuracy.by_kind})
    if kinds:
        per_kind = [[r.label, *(f"{a[0]}/{a[1]}" if (a := r.accuracy.by_kind.get(k)) else "-" for k in kinds)]
                    for r in rows if r.accuracy]
        out.append("<h3>Right answers per kind of item</h3>" + _table(["configuration", *kinds], per_kind))
    prefixes = [r for r in rows if r.agreement is not None]
    if prefixes:
        prompts = result.workload.prompts
        header = ["prompt", "category", *(f"{r.label}: common prefix ({r.agreement.unit})" for r in prefixes
                                           if r.agreement)]
        count = max(len(r.agreement.common_prefix) for r in prefixes if r.agreement)
        body = [[str(i + 1), prompts[i].category if i < len(prompts) else "-",
                 *(str(r.agreement.common_prefix[i]) if r.agreement and i < len(r.agreement.common_prefix) else "-"
                   for r in prefixes)] for i in range(count)]
        out.append(f"<h3>Each prompt: the answer's common prefix with {html.escape(ref)}'s</h3>" + _table(header, body))
    samples = [c for c in result.configs if c.quality and c.quality.accuracy and c.quality.accuracy.samples_file]
    if samples:
        out.append("<p>Every scored item (prompt, answer, right or wrong), beside this report: "
                   + ", ".join(html.escape(str(c.quality.accuracy.samples_file)) for c in samples
                               if c.quality and c.quality.accuracy) + ".</p>")
    problems = _problems(result)
    if problems:
        out.append("<p class='bad'>" + "<br>".join(html.escape(p) for p in problems) + "</p>")
    return "".join(out)
