"""ExperimentView: the plan, a progress bar (configuration, level or quality pass, ETA), then the
winners, each configuration's quality beside its speed, and the curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as W

from workbench.experiment import ExperimentProgress, ExperimentResult, plan_lines, run_experiment
from workbench.experiment.analysis import WINNER_METRICS
from workbench.experiment.charts import lines_svg
from workbench.experiment.quality_report import LOSS_MARK, QUALITY_COLUMNS, quality_sentences, winner_quality
from workbench.experiment.slo_report import slo_html
from workbench.notebook.html import esc, table
from workbench.recipes import Catalog

__all__ = ["ExperimentView", "experiment_summary"]


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def experiment_summary(result: ExperimentResult, report: Path | None = None) -> str:
    """HTML: the answer (with an SLO search, how many users each serves first), the winners, each
    level's figures and the trade-off curve."""
    out = [slo_html(result)]
    for x in result.crossovers():
        out.append(f"<b>{esc(x.summary)}</b><br>")
    ws = result.winners()
    extra_header, extra, lost = winner_quality(result, ws)
    rows = [[str(w.concurrency), WINNER_METRICS[w.metric][0], w.label + (LOSS_MARK if w.label in lost else ""),
             _num(w.value, 2), "—" if w.lead is None else f"{w.lead:.2f}x over {w.runner_up}", *cells]
            for w, cells in zip(ws, extra)]
    out.append(table(["concurrency", "figure", "winner", "value", "lead", *extra_header], rows))
    quality = result.quality_rows()
    if quality:
        out.append("<br><b>Quality beside speed</b>")
        out.append(table(list(QUALITY_COLUMNS), [[r.label, r.agreement_text(), r.accuracy_text(), r.verdict.value]
                                                  for r in quality]))
        out.append("".join(f"{esc(sentence)}<br>" for sentence in quality_sentences(result)))
    levels = [[f.label, str(f.concurrency), _num(f.decode_per_user_tps), _num(f.output_tps), _num(f.ttft_ms_mean),
               "—" if f.acceptance_rate is None else f"{f.acceptance_rate:.1%}",
               "—" if f.acceptance_rate_metrics is None else f"{f.acceptance_rate_metrics:.1%}"]
              for f in sorted(result.figures(), key=lambda f: (f.concurrency, f.label))]
    out.append(table(["configuration", "concurrency", "per-user decode tok/s", "total output tok/s", "mean TTFT ms",
                      "acceptance (responses)", "acceptance (/metrics)"], levels))
    failed = [c for c in result.configs if c.status == "failed"]
    for c in failed:
        out.append(f"<br><b>{esc(c.label)} failed to launch:</b> {esc(str((c.diagnosis or {}).get('summary')))}")
    curve: dict[str, list[tuple[float, float, str]]] = {}
    for f in sorted(result.figures(), key=lambda f: f.concurrency):
        if f.output_tps is not None and f.decode_per_user_tps is not None and f.partial is None:
            curve.setdefault(f.label, []).append((f.output_tps, f.decode_per_user_tps, f"c={f.concurrency}"))
    out.append("<br>" + lines_svg(curve, "total output tok/s", "per-user decode tok/s"))
    if report is not None:
        out.append(f"<br>The whole report (self-contained HTML): <code>{esc(str(report))}</code>")
    return "".join(out)


class ExperimentView(W.VBox):  # type: ignore[misc]
    """Run an experiment with its progress shown; the result is kept as `.result`."""

    def __init__(self, **kwargs: Any) -> None:
        self.plan = W.HTML()
        self.bar = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="60%"))
        self.line = W.HTML()
        self.summary = W.HTML()
        self.result: ExperimentResult | None = None
        super().__init__([self.plan, self.bar, self.line, self.summary], **kwargs)

    def _progress(self, p: ExperimentProgress) -> None:
        self.bar.max = max(1, p.total or 1)
        self.bar.value = min(p.done, self.bar.max)
        self.line.value = f"<code>{esc(p.line())}</code>"

    def run(self, experiment: ExperimentResult, directory: Path | str, catalog: Catalog,
            **kwargs: Any) -> ExperimentResult:
        self.plan.value = "<br>".join(esc(line) for line in plan_lines(experiment))
        self.result = run_experiment(experiment, directory, catalog, progress=self._progress, **kwargs)
        status = self.result.status + (f": {self.result.partial}" if self.result.partial else "")
        self.line.value = f"<b>{esc(status)}</b>"
        self.summary.value = experiment_summary(self.result, Path(directory) / "report.html")
        return self.result
