"""Experiment tab: choose configurations and a sweep (and/or an SLO search), see the plan, run it
with progress, each level's figures as it finishes, the answer (how many users each serves
within the SLO), the winners table (with the fastest that kept quality), each configuration's
quality beside its speed, the curves and a link to the self-contained report, in a folder
that is kept (experiments/<date-time>).

Before a run it says what already holds the machine (workbench.experiment.occupancy): on
the CPU engine the experiment starts its own vLLM beside a running server (and says so); on
a GPU it refuses; either way it offers to measure the running server (attach) or stop it.

The run launches vLLM servers, so (like the Server tab's launch) it is a private
event: it is left out of the app's API, and its extra flags are re-checked here
against vLLM's own flag table and the launch allowlist. Previewing the plan is public
and starts nothing.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
from workbench.experiment.configs import ExperimentConfig
from workbench.experiment.occupancy import Occupancy
from workbench.experiment.quality import BUILTIN_TASK, QUALITY_MODES, QualitySettings, Verdict
from workbench.experiment.quality_report import LOSS_MARK, NO_LOSS_COLUMN, QUALITY_COLUMNS, quality_sentences
from workbench.experiment.results import EXPERIMENTS_DIR, REPORT_FILE, ExperimentResult, default_output_dir
from workbench.experiment.runner import occupancy_before
from workbench.experiment.slo import SloSearch, parse_slos
from workbench.experiment.slo_report import slo_html
from workbench.bench.goodput import parse_goodput
from workbench.errors import InputError, WorkbenchError
from workbench.ui.background import BackgroundWork
from workbench.recipes import Selection
from workbench.recipes.plan import split_extra_flags
from workbench.server import find_running
from workbench.server.page_flags import check_page_flags, vllm_flag_table

MAX_CONCURRENCY = 4096
WINNER_COLUMNS = ["concurrency", "figure", "winner", "value", "lead"]
LEVEL_COLUMNS = ["configuration", "concurrency", "per-user decode tok/s", "total output tok/s", "mean TTFT ms",
                 "acceptance (responses)", "acceptance (/metrics)"]


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


def _quality(mode, task, reference, configs) -> QualitySettings:
    reference = (reference or "").strip() or None
    if reference is not None and all(c.label != reference for c in configs):
        raise InputError(f"The reference {reference!r} names no configuration.",
                         hint="Give one of: " + ", ".join(c.label for c in configs) + ", or leave it empty "
                         "for the first.", settings=("reference",))
    return QualitySettings(mode or "quick", task=(task or "").strip() or BUILTIN_TASK, reference=reference)


def _experiment(catalog, hardware, specs, levels, requests, osl, extra, goodput, quality="off", task="",
                reference="", slo=None, slo_by=None, max_concurrency=None):
    extra_text = (extra or "").strip()
    base = Selection(hardware=(hardware or "").strip() or None, extra=[extra_text] if extra_text else [])
    configs = configs_from_specs(specs or "", base, catalog)
    search = _search(slo, slo_by, max_concurrency)
    settings = ExperimentSettings(concurrency=_levels(levels, search is not None),
                                  requests_per_level=_whole(requests, "Requests", None),
                                  output_tokens=_whole(osl, "Output tokens", 128) or 128,
                                  goodput=parse_goodput(goodput or None),
                                  quality=_quality(quality, task, reference, configs),
                                  slo=None if search is None else search.to_dict())
    return new_experiment(configs, settings, builtin_workload())


def winners_frame(result) -> pd.DataFrame:
    """The winners; with a quality pass, a winner that lost quality is flagged and the fastest that kept it named."""
    kept = {(w.concurrency, w.metric): w for w in result.no_loss_winners()}
    lost = {r.label for r in result.quality_rows() if r.verdict is Verdict.LOSS}
    columns = [*WINNER_COLUMNS, *([NO_LOSS_COLUMN] if kept else [])]
    rows = []
    for w in result.winners():
        row = {"concurrency": w.concurrency, "figure": WINNER_METRICS[w.metric][0],
               "winner": w.label + (LOSS_MARK if w.label in lost else ""), "value": round(w.value, 2),
               "lead": "" if w.lead is None else f"{w.lead:.2f}x over {w.runner_up}"}
        if kept:
            best = kept.get((w.concurrency, w.metric))
            row[NO_LOSS_COLUMN] = "-" if best is None else f"{best.label} ({best.value:,.2f})"
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def quality_frame(result) -> pd.DataFrame:
    """Each checked configuration: agreement with the reference, accuracy with its interval, the verdict."""
    rows = [dict(zip(QUALITY_COLUMNS, [r.label, r.agreement_text(), r.accuracy_text(), r.verdict.value]))
            for r in result.quality_rows()]
    return pd.DataFrame(rows, columns=list(QUALITY_COLUMNS))


def levels_frame(result) -> pd.DataFrame:
    def r(v, d=1):
        return None if v is None else round(v, d)

    rows = [{"configuration": f.label, "concurrency": f.concurrency, "per-user decode tok/s": r(f.decode_per_user_tps),
             "total output tok/s": r(f.output_tps), "mean TTFT ms": r(f.ttft_ms_mean),
             "acceptance (responses)": r(f.acceptance_rate, 3), "acceptance (/metrics)": r(f.acceptance_rate_metrics, 3)}
            for f in sorted(result.figures(), key=lambda f: (f.concurrency, f.label))]
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS)


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
    answer += "".join(f"<p>{sentence}</p>" for sentence in quality_sentences(result))
    return (slo_html(result) + answer + lines_svg(tradeoff, "total output tok/s", "per-user decode tok/s")
            + lines_svg(per_user, "concurrency", "per-user decode tok/s", log_x=True))


def machine_outputs(occupancy: Occupancy | None) -> tuple[str, Any]:
    """What holds the machine, in words, and whether to offer Attach / Stop (a workbench server runs)."""
    if occupancy is None:
        return "", gr.Row(visible=False)
    lines = occupancy.lines()
    text = "\n\n".join(f"**{line}**" if occupancy.blocking and line == lines[-1] else line for line in lines)
    return text, gr.Row(visible=occupancy.server is not None)


def report_link(folder: Path) -> str:
    """The results folder, and a link that opens its report (the app serves the experiments folder)."""
    report = folder / REPORT_FILE
    return (f"Results in `{folder}` (kept). [Open the report]"
            f"(gradio_api/file={urllib.parse.quote(str(report))})")


def run_updates(experiment: ExperimentResult, folder: Path, run: Callable[[Callable[[Any], None]], ExperimentResult],
                plan: str) -> Iterator[tuple[Any, ...]]:
    """The tab's (progress, winners, quality, levels, curves, report) while `run(report)` runs the experiment:
    the progress line, and the figures again each time a level finishes (not only at the end)."""
    skip = gr.skip
    head = f"{plan}\n\n{report_link(folder)}"
    yield head, skip(), skip(), skip(), skip(), gr.DownloadButton(visible=False)
    work = BackgroundWork(run)
    shown = 0
    for p in work:
        bar = ""
        if p.total:
            filled = int(20 * p.done / p.total)
            bar = "`[" + "#" * filled + "." * (20 - filled) + "]` "
        text = f"{head}\n\n{bar}**{p.line()}**"
        finished = sum(len(c.levels) for c in experiment.configs)
        if finished != shown:  # a level finished: its figures now, the rest as they come
            shown = finished
            yield (text, winners_frame(experiment), quality_frame(experiment), levels_frame(experiment),
                   curves_html(experiment), skip())
        else:
            yield text, skip(), skip(), skip(), skip(), skip()
    if work.error is not None:
        yield f"**Experiment failed:** {work.error}\n\n{report_link(folder)}", skip(), skip(), skip(), skip(), skip()
        return
    result = work.result
    failed = "".join(f"\n\n⚠ **{c.label} failed to launch:** {(c.diagnosis or {}).get('summary')}"
                     for c in result.configs if c.status == "failed")
    status = "**Done.**" if result.status == "done" else f"⚠ **Partial:** {result.partial}"
    problems = "".join(f"\n\n⚠ **{c.label}, quality ({p.part}):** {p.message} {p.hint or ''}"
                       for c in result.configs if c.quality for p in c.quality.problems)
    yield (f"{status} {report_link(folder)}{failed}{problems}", winners_frame(result), quality_frame(result),
           levels_frame(result), curves_html(result), gr.DownloadButton(value=str(folder / REPORT_FILE), visible=True))


@dataclass
class ExperimentTab:
    inputs: list[Any]
    machine: gr.Markdown
    occupied: gr.Row
    check_machine: Callable[..., tuple[str, Any]]  # (inputs) -> machine, occupied


def create_ui(catalog, default_hardware: str, state_dir=None, results_root: Path | None = None) -> ExperimentTab:
    """`results_root`: where experiments' folders go (default: experiments/ in the current folder)."""
    root = (results_root or Path(EXPERIMENTS_DIR)).resolve()
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
            quality = gr.Dropdown(list(QUALITY_MODES), value="quick", elem_id="exp-quality",
                                  label="Quality check after each sweep (quick: about a minute per configuration "
                                  "on the CPU engine)")
            task = gr.Textbox(BUILTIN_TASK, label="Quality task (lm-eval)", elem_id="exp-quality-task")
            reference = gr.Textbox("", label="Reference configuration (empty: the first)",
                                   elem_id="exp-reference")
            preview = gr.Button("Show the plan", elem_id="exp-preview")
            run = gr.Button("Run experiment", variant="primary", elem_id="exp-run")
            stop = gr.Button("Stop (keeps what was measured)", elem_id="exp-stop")
        with gr.Column(scale=2):
            machine = gr.Markdown(elem_id="exp-machine")
            with gr.Row(visible=False) as occupied:
                attach = gr.Button("Measure the running server instead (attach)", elem_id="exp-attach")
                stop_server = gr.Button("Stop the running server", elem_id="exp-stop-server")
            progress = gr.Markdown("*Not run yet.* The built-in workload: code edits, summaries, extraction, "
                                   f"chat and copying; each configuration is launched in turn on one port. "
                                   f"Results go to `{root}`.", elem_id="exp-progress")
            # Headers from the start (no placeholder columns); wrapped so no column runs off the right.
            winners = gr.Dataframe(headers=WINNER_COLUMNS, label="Winners per concurrency", interactive=False,
                                   wrap=True, elem_id="exp-winners")
            quality_table = gr.Dataframe(headers=list(QUALITY_COLUMNS), label="Quality beside speed",
                                         interactive=False, wrap=True, elem_id="exp-quality-table")
            table = gr.Dataframe(headers=LEVEL_COLUMNS, label="Each level's figures (as each level finishes)",
                                 interactive=False, wrap=True, elem_id="exp-levels-table")
            curves = gr.HTML(elem_id="exp-curves")
            report = gr.DownloadButton("Download the report (HTML)", visible=False, elem_id="exp-report")
    stop_flag = threading.Event()

    def preview_plan(hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc):
        try:
            experiment = _experiment(catalog, hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc)
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        return "\n\n".join(plan_lines(experiment))

    def check_machine(hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc):
        try:
            experiment = _experiment(catalog, hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc)
        except WorkbenchError:
            return machine_outputs(None)  # the plan says why when it is shown or run
        return machine_outputs(occupancy_before(experiment, catalog, state_dir=state_dir))

    def start(experiment: ExperimentResult):
        folder = default_output_dir(root)
        stop_flag.clear()
        yield from run_updates(experiment, folder,
                               lambda report: run_experiment(experiment, folder, catalog, progress=report,
                                                             should_stop=stop_flag.is_set, state_dir=state_dir),
                               "\n\n".join(plan_lines(experiment)))

    def run_experiment_fn(hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc):
        try:
            experiment = _experiment(catalog, hw, sp, lv, rq, ol, ex, gp, qm, qt, rf, sl, sb, mc)
            if (ex or "").strip():
                check_page_flags(split_extra_flags([ex.strip()]), vllm_flag_table())
            occupancy = occupancy_before(experiment, catalog, state_dir=state_dir)
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        if occupancy is not None and occupancy.blocking:
            error = occupancy.error()
            yield (f"**Not started.** {error.message}\n\n{error.hint}", gr.skip(), gr.skip(), gr.skip(), gr.skip(),
                   gr.skip())
            return
        yield from start(experiment)

    def attach_fn(lv, rq, ol, gp, qm, qt, sl, sb, mc):
        running = find_running(state_dir)
        if running is None:
            raise gr.Error("No workbench server is running now: run the experiment, or launch one first.",
                           print_exception=False)
        try:
            search = _search(sl, sb, mc)
            settings = ExperimentSettings(concurrency=_levels(lv, search is not None),
                                          requests_per_level=_whole(rq, "Requests", None),
                                          output_tokens=_whole(ol, "Output tokens", 128) or 128,
                                          goodput=parse_goodput(gp or None), attach_url=running.base_url,
                                          quality=QualitySettings(qm or "quick", task=(qt or "").strip() or BUILTIN_TASK),
                                          slo=None if search is None else search.to_dict())
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        experiment = new_experiment([ExperimentConfig(f"attached ({running.model})", Selection())], settings,
                                    builtin_workload())
        yield from start(experiment)

    def stop_server_fn():
        running = find_running(state_dir)
        if running is not None:
            running.stop()

    inputs = [hardware, specs, levels, requests, osl, extra, goodput, quality, task, reference, slo, slo_by,
              max_concurrency]
    shown = [progress, winners, quality_table, table, curves, report]
    said = [machine, occupied]
    preview.click(preview_plan, inputs, progress).then(check_machine, inputs, said)
    # Launches servers: not in the app's API (see the module docstring).
    run.click(check_machine, inputs, said).then(
        run_experiment_fn, inputs, shown, concurrency_limit=1, concurrency_id="experiment", api_visibility="private")
    attach.click(attach_fn, [levels, requests, osl, goodput, quality, task, slo, slo_by, max_concurrency], shown,
                 concurrency_limit=1, concurrency_id="experiment", api_visibility="private")
    stop_server.click(stop_server_fn, None, None, api_visibility="private").then(check_machine, inputs, said)
    stop.click(stop_flag.set, None, None, api_visibility="private")
    return ExperimentTab(inputs, machine, occupied, check_machine)
