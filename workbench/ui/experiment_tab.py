"""Experiment tab: choose configurations and a sweep (and/or an SLO search), see the plan, run it
with progress, then the answer (how many users each serves within the SLO), the winners table,
the curves and a link to the self-contained report.

The run launches vLLM servers, so (like the Server tab's launch) it is a private
event: it is left out of the app's API, and its extra flags are re-checked here
against vLLM's own flag table and the launch allowlist. Previewing the plan is public
and starts nothing.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from workbench.experiment import (
    ExperimentSettings,
    builtin_workload,
    configs_from_specs,
    new_experiment,
    plan_lines,
    run_experiment,
)
from workbench.experiment.analysis import WINNER_METRICS
from workbench.experiment.charts import lines_svg
from workbench.experiment.slo import SloSearch, parse_slos
from workbench.experiment.slo_report import slo_html
from workbench.bench.goodput import parse_goodput
from workbench.errors import InputError, WorkbenchError
from workbench.ui.background import BackgroundWork
from workbench.recipes import Selection

MAX_CONCURRENCY = 4096


def _levels(text: str | None, search: bool = False) -> list[int]:
    words = [w for w in (text or "").replace(" ", "").split(",") if w]
    if not words and search:
        return []  # the SLO search alone
    try:
        levels = sorted({int(w) for w in words})
    except ValueError:
        raise InputError(f"Concurrency {text!r} is not a list of whole numbers.", hint="Write e.g. 1,4,16.") from None
    if not levels or any(n < 1 or n > MAX_CONCURRENCY for n in levels):
        raise InputError(f"Concurrency {text!r}: give levels from 1 to {MAX_CONCURRENCY}.", hint="Write e.g. 1,4,16.")
    return levels


def _whole(text: str | None, what: str, default: int | None) -> int | None:
    text = (text or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{what} must be a whole number, not {text!r}.", hint="Leave it empty for the default.") \
            from None
    if value < 1 or value > 100_000:
        raise InputError(f"{what} must be between 1 and 100000, not {value}.", hint="Leave it empty for the default.")
    return value


def _search(slo, slo_by, max_concurrency) -> SloSearch | None:
    if not (slo or "").strip():
        return None
    highest = _whole(max_concurrency, "Highest concurrency", 256) or 256
    if slo_by == "rate":
        return SloSearch(parse_slos(slo), "rate", highest)
    return SloSearch(parse_slos(slo), "concurrency", highest)


def _experiment(catalog, hardware, specs, levels, requests, osl, extra, goodput, slo=None, slo_by=None,
                max_concurrency=None):
    extra_text = (extra or "").strip()
    base = Selection(hardware=(hardware or "").strip() or None, extra=[extra_text] if extra_text else [])
    configs = configs_from_specs(specs or "", base, catalog)
    search = _search(slo, slo_by, max_concurrency)
    settings = ExperimentSettings(concurrency=_levels(levels, search is not None),
                                  requests_per_level=_whole(requests, "Requests", None),
                                  output_tokens=_whole(osl, "Output tokens", 128) or 128,
                                  goodput=parse_goodput(goodput or None),
                                  slo=None if search is None else search.to_dict())
    return new_experiment(configs, settings, builtin_workload())


def winners_frame(result) -> pd.DataFrame:
    rows = [{"concurrency": w.concurrency, "figure": WINNER_METRICS[w.metric][0], "winner": w.label,
             "value": round(w.value, 2), "lead": "" if w.lead is None else f"{w.lead:.2f}x over {w.runner_up}"}
            for w in result.winners()]
    return pd.DataFrame(rows, columns=["concurrency", "figure", "winner", "value", "lead"])


def levels_frame(result) -> pd.DataFrame:
    def r(v, d=1):
        return None if v is None else round(v, d)

    rows = [{"configuration": f.label, "concurrency": f.concurrency, "per-user decode tok/s": r(f.decode_per_user_tps),
             "total output tok/s": r(f.output_tps), "mean TTFT ms": r(f.ttft_ms_mean),
             "acceptance (responses)": r(f.acceptance_rate, 3), "acceptance (/metrics)": r(f.acceptance_rate_metrics, 3)}
            for f in sorted(result.figures(), key=lambda f: (f.concurrency, f.label))]
    return pd.DataFrame(rows)


def curves_html(result) -> str:
    tradeoff: dict[str, Any] = {}
    per_user: dict[str, Any] = {}
    for f in sorted(result.figures(), key=lambda f: f.concurrency):
        if f.partial is not None or f.decode_per_user_tps is None:
            continue
        per_user.setdefault(f.label, []).append((float(f.concurrency), f.decode_per_user_tps, f"c={f.concurrency}"))
        if f.output_tps is not None:
            tradeoff.setdefault(f.label, []).append((f.output_tps, f.decode_per_user_tps, f"c={f.concurrency}"))
    answer = "".join(f"<p><b>{x.summary}</b></p>" for x in result.crossovers())
    return (answer + lines_svg(tradeoff, "total output tok/s", "per-user decode tok/s")
            + lines_svg(per_user, "concurrency", "per-user decode tok/s", log_x=True))


def create_ui(catalog, default_hardware: str, state_dir=None) -> None:
    from workbench.recipes.plan import split_extra_flags
    from workbench.server.page_flags import check_page_flags, vllm_flag_table

    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            hardware = gr.Textbox(default_hardware, label="Hardware", elem_id="exp-hardware")
            specs = gr.Textbox("off,ngram" if default_hardware == "cpu" else "off,mtp,dspark",
                               label="Configurations: speculative decoding modes (off = none)", elem_id="exp-specs")
            levels = gr.Textbox("1,4,16", label="Concurrency levels", elem_id="exp-levels")
            requests = gr.Textbox("", label="Requests per level (empty: prompts in the workload, or 2 x concurrency)",
                                  elem_id="exp-requests")
            osl = gr.Textbox("128", label="Output tokens per request", elem_id="exp-osl")
            extra = gr.Textbox("", label="Extra vllm serve flags (every configuration)", elem_id="exp-extra")
            goodput = gr.Textbox("", label="Goodput SLOs (optional)", placeholder="e.g. ttft:500 tpot:50",
                                 elem_id="exp-goodput")
            slo = gr.Textbox("", label="SLO search (optional): how many users each serves within these",
                             placeholder="e.g. ttft_p90:500 tpot_p90:25 (leave the levels empty to search only)",
                             elem_id="exp-slo")
            with gr.Row():
                slo_by = gr.Radio(["concurrency", "rate"], value="concurrency", label="Search by",
                                  elem_id="exp-slo-by")
                max_concurrency = gr.Textbox("256", label="Highest concurrency (by rate: most in flight)",
                                             elem_id="exp-max-concurrency")
            preview = gr.Button("Show the plan", elem_id="exp-preview")
            run = gr.Button("Run experiment", variant="primary", elem_id="exp-run")
            stop = gr.Button("Stop (keeps what was measured)", elem_id="exp-stop")
        with gr.Column(scale=2):
            progress = gr.Markdown("*Not run yet.* The built-in workload: code edits, summaries, extraction, "
                                   "chat and copying; each configuration is launched in turn on one port.",
                                   elem_id="exp-progress")
            winners = gr.Dataframe(label="Winners per concurrency", interactive=False, elem_id="exp-winners")
            table = gr.Dataframe(label="Each level's figures", interactive=False, elem_id="exp-levels-table")
            curves = gr.HTML(elem_id="exp-curves")
            report = gr.DownloadButton("Download the report (HTML)", visible=False, elem_id="exp-report")
    stop_flag = threading.Event()

    def preview_plan(hw, sp, lv, rq, ol, ex, gp, sl, sb, mc):
        try:
            experiment = _experiment(catalog, hw, sp, lv, rq, ol, ex, gp, sl, sb, mc)
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        return "\n\n".join(plan_lines(experiment))

    def run_experiment_fn(hw, sp, lv, rq, ol, ex, gp, sl, sb, mc):
        try:
            experiment = _experiment(catalog, hw, sp, lv, rq, ol, ex, gp, sl, sb, mc)
            if (ex or "").strip():
                check_page_flags(split_extra_flags([ex.strip()]), vllm_flag_table())
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        folder = Path(tempfile.mkdtemp(prefix=f"experiment-{dt.datetime.now():%Y%m%d-%H%M%S}-"))
        plan = "\n\n".join(plan_lines(experiment))
        stop_flag.clear()
        work = BackgroundWork(lambda report: run_experiment(experiment, folder, catalog, progress=report,
                                                            should_stop=stop_flag.is_set, state_dir=state_dir))
        yield plan, gr.skip(), gr.skip(), gr.skip(), gr.DownloadButton(visible=False)
        for p in work:
            bar = ""
            if p.total:
                filled = int(20 * p.done / p.total)
                bar = "`[" + "#" * filled + "." * (20 - filled) + "]` "
            yield f"{plan}\n\n{bar}**{p.line()}**", gr.skip(), gr.skip(), gr.skip(), gr.skip()
        if work.error is not None:
            yield f"❌ **Experiment failed:** {work.error}", gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        result = work.result
        failed = "".join(f"\n\n⚠️ **{c.label} failed to launch:** {(c.diagnosis or {}).get('summary')}"
                         for c in result.configs if c.status == "failed")
        status = "✅ **Done.**" if result.status == "done" else f"⚠️ **Partial:** {result.partial}"
        yield (f"{status} Results in `{folder}`.{failed}", winners_frame(result), levels_frame(result),
               slo_html(result) + curves_html(result),
               gr.DownloadButton(value=str(folder / "report.html"), visible=True))

    inputs = [hardware, specs, levels, requests, osl, extra, goodput, slo, slo_by, max_concurrency]
    preview.click(preview_plan, inputs, progress)
    # Launches servers: not in the app's API (see the module docstring).
    run.click(run_experiment_fn, inputs, [progress, winners, table, curves, report], concurrency_limit=1,
              concurrency_id="experiment", api_visibility="private")
    stop.click(stop_flag.set, None, None, api_visibility="private")
