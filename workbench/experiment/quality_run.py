"""Measure one configuration's quality on its running server (after its sweep).

    measure_quality(base_url, model, prompts, settings, output_tokens, folder, label, progress, should_stop)

First the agreement answers: each of the first workload prompts, one at a time (so batching
never changes an answer), at temperature 0, with vLLM's `return_token_ids`. Then the accuracy:
lm-eval in a child process (lm_eval_worker.py), its log and every scored item kept in
`folder`, its progress read from the events it writes. Whatever fails is recorded as a
QualityProblem with its kind, never raised: the speed figures are already saved, and a
problem in one half leaves the other half's figure. `should_stop` ends it at once (the
child's process group is stopped) and marks it partial.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from workbench.errors import LaunchError
from workbench.experiment.quality import (
    BUILTIN_TASK,
    Accuracy,
    Answer,
    ConfigQuality,
    ProblemKind,
    QualityProblem,
    QualitySettings,
)
from workbench.experiment.quality_tasks import TASKS_DIR
from workbench.experiment.workloads import WorkloadPrompt
from workbench.server.process import spawn_group, stop_group

__all__ = ["QualityProgress", "guess_seconds", "measure_quality"]

log = logging.getLogger("workbench.experiment")

_REQUEST_TIMEOUT_S = 300.0
_HARNESS_RETRIES = 2
# Guesses for the estimate before a pass has run (the CPU engine on 2 cores): replaced by the measured time.
_GUESS_HARNESS_START_S = 12.0
_GUESS_ITEM_S = 2.0
_GUESS_PROMPT_S = 1.5


@dataclass(frozen=True)
class QualityProgress:
    phase: Literal["agreement", "accuracy"]
    done: int
    total: int | None
    message: str = ""


ProgressFn = Callable[[QualityProgress], None]
StopFn = Callable[[], bool]


def guess_seconds(quality: QualitySettings, prompts: int, output_tokens: int, decode_tps: float,
                  task_items: int = 300) -> float:
    """A rough guess of one configuration's pass: each agreement prompt's prefill and decode,
    the harness's start, and each task item (the built-in task's size unless told)."""
    if not quality.on:
        return 0.0
    tokens = quality.tokens_for(output_tokens)
    agreement = quality.prompts_for(prompts) * (_GUESS_PROMPT_S + tokens / max(decode_tps, 1e-6))
    items = quality.items_limit() or task_items
    return agreement + _GUESS_HARNESS_START_S + items * _GUESS_ITEM_S


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "config"


def _answers(base_url: str, model: str | None, prompts: Sequence[WorkloadPrompt], max_tokens: int,
             progress: ProgressFn | None, should_stop: StopFn | None,
             quality: ConfigQuality) -> None:
    """The agreement answers, one request at a time; a failure is recorded and ends this half."""
    quality.answers, quality.answer_tokens = [], max_tokens
    with httpx.Client(timeout=_REQUEST_TIMEOUT_S) as client:
        for i, prompt in enumerate(prompts):
            if should_stop is not None and should_stop():
                quality.problems.append(QualityProblem(ProblemKind.INTERRUPTED, "agreement",
                                                       "Stopped by the user during the agreement answers."))
                return
            if progress:
                progress(QualityProgress("agreement", i, len(prompts), f"prompt {i + 1} ({prompt.category})"))
            body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt.prompt}], "max_tokens": max_tokens,
                                    "temperature": 0.0, "return_token_ids": True}
            if model:
                body["model"] = model
            try:
                answer = client.post(f"{base_url}/v1/chat/completions", json=body)
                answer.raise_for_status()
                choice = answer.json()["choices"][0]
            except httpx.HTTPStatusError as exc:
                quality.problems.append(QualityProblem(
                    ProblemKind.SERVER_REFUSED, "agreement",
                    f"The server refused agreement prompt {i + 1} (HTTP {exc.response.status_code}: "
                    f"{exc.response.text[:300]}).", "Check the server's log; the speed figures are kept."))
                return
            except httpx.TransportError as exc:
                quality.problems.append(QualityProblem(
                    ProblemKind.SERVER_UNREACHABLE, "agreement",
                    f"The server could not be reached for agreement prompt {i + 1} ({type(exc).__name__}: {exc}).",
                    "Check that the server is still running; the speed figures are kept."))
                return
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                quality.problems.append(QualityProblem(
                    ProblemKind.SERVER_REFUSED, "agreement",
                    f"The server's answer to agreement prompt {i + 1} is not a chat completion ({exc!r}).",
                    "Is the URL a vLLM (OpenAI-compatible) server?"))
                return
            message = choice.get("message") or {}
            ids = choice.get("token_ids")
            quality.answers.append(Answer(str(message.get("content") or ""),
                                          [int(t) for t in ids] if isinstance(ids, list) else None,
                                          choice.get("finish_reason")))
    if progress:
        progress(QualityProgress("agreement", len(prompts), len(prompts)))


def _task_request(quality: QualitySettings) -> dict[str, Any]:
    """Which tasks lm-eval indexes: only the built-in one's folder (fast), or its whole catalogue too."""
    if quality.task == BUILTIN_TASK:
        return {"task": BUILTIN_TASK, "include_path": str(TASKS_DIR / BUILTIN_TASK), "include_defaults": False}
    return {"task": quality.task, "include_path": str(TASKS_DIR), "include_defaults": True}


def _read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    try:
        with open(path, encoding="utf-8") as f:
            f.seek(offset)
            text = f.read()
    except FileNotFoundError:
        return [], offset
    complete = text[: text.rfind("\n") + 1]
    events = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return events, offset + len(complete.encode("utf-8"))


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


_STOPPED: dict[str, Any] = {"event": "stopped"}


def _follow(popen: Any, events_path: Path, task: str, progress: ProgressFn | None,
            should_stop: StopFn | None) -> dict[str, Any] | None:
    """Read the child's events until it exits: its last result or problem, _STOPPED, or None."""
    offset, total, finished = 0, None, None
    while True:
        exited = popen.poll() is not None
        events, offset = _read_events(events_path, offset)
        for event in events:
            kind = event.get("event")
            if kind == "total":
                total = int(event["total"])
                if progress:
                    progress(QualityProgress("accuracy", 0, total, task))
            elif kind == "answered" and progress:
                progress(QualityProgress("accuracy", int(event["done"]), total, task))
            elif kind == "loading" and progress:
                progress(QualityProgress("accuracy", 0, None, f"loading {event.get('task')}"))
            elif kind in ("result", "problem"):
                finished = event
        if exited:
            return finished
        if should_stop is not None and should_stop():
            return _STOPPED
        time.sleep(0.25)


def _accuracy(base_url: str, model: str | None, quality_settings: QualitySettings, folder: Path, label: str,
              progress: ProgressFn | None, should_stop: StopFn | None, quality: ConfigQuality) -> None:
    """lm-eval in its child process; the result (or the problem) recorded on `quality`."""
    if importlib.util.find_spec("lm_eval") is None:
        quality.problems.append(QualityProblem(
            ProblemKind.HARNESS_MISSING, "accuracy", "lm-eval (EleutherAI's evaluation harness) is not installed.",
            "Install it: pip install 'lm-eval[api]==0.4.13' (scripts/install.sh does); the agreement needs only "
            "the server."))
        return
    folder.mkdir(parents=True, exist_ok=True)
    stem = _safe(label)
    log_path, samples = folder / f"{stem}-lm-eval.log", folder / f"{stem}-samples.jsonl"
    samples.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="workbench-quality-") as scratch:
        events_path, request_path = Path(scratch) / "events.jsonl", Path(scratch) / "request.json"
        request = {**_task_request(quality_settings), "base_url": f"{base_url}/v1/chat/completions",
                   "model": model or "", "limit": quality_settings.items_limit(),
                   "num_concurrent": quality_settings.accuracy_concurrency, "max_retries": _HARNESS_RETRIES,
                   "timeout_s": int(_REQUEST_TIMEOUT_S), "events": str(events_path), "samples": str(samples)}
        request_path.write_text(json.dumps(request), encoding="utf-8")
        if progress:
            progress(QualityProgress("accuracy", 0, None, f"starting lm-eval ({quality_settings.task})"))
        try:
            child = spawn_group([sys.executable, "-m", "workbench.experiment.lm_eval_worker", str(request_path)],
                                {"TOKENIZERS_PARALLELISM": "false"}, log_path, what="lm-eval",
                                hint="Check that this Python can run lm-eval.")
        except LaunchError as exc:
            quality.problems.append(QualityProblem(ProblemKind.HARNESS_FAILED, "accuracy", exc.message, exc.hint))
            return
        try:
            finished = _follow(child.popen, events_path, quality_settings.task, progress, should_stop)
        finally:  # Ctrl-C or an error here: the child (in its own session) must not outlive us
            stop_group(child.group, timeout=5.0)
    if finished is _STOPPED:
        quality.problems.append(QualityProblem(ProblemKind.INTERRUPTED, "accuracy",
                                               "Stopped by the user while lm-eval ran."))
        return
    if finished is None:
        quality.problems.append(QualityProblem(
            ProblemKind.HARNESS_FAILED, "accuracy",
            f"lm-eval ended (exit {child.popen.returncode}) without a result: {_log_tail(log_path)}",
            f"Its log: {log_path}."))
    elif finished["event"] == "problem":
        quality.problems.append(QualityProblem(ProblemKind(finished["kind"]), "accuracy", str(finished["message"]),
                                               finished.get("hint")))
    else:
        quality.accuracy = Accuracy.from_dict({**finished, "samples_file": f"{folder.name}/{samples.name}"})


def measure_quality(base_url: str, model: str | None, prompts: Sequence[WorkloadPrompt], settings: QualitySettings,
                    output_tokens: int, folder: Path, label: str, progress: ProgressFn | None = None,
                    should_stop: StopFn | None = None) -> ConfigQuality:
    """Both halves of the quality pass on the server at `base_url` (see the module docstring)."""
    started = time.monotonic()
    quality = ConfigQuality()
    chosen = list(prompts[: settings.prompts_for(len(prompts))])
    _answers(base_url, model, chosen, settings.tokens_for(output_tokens), progress, should_stop, quality)
    if not any(p.kind is ProblemKind.INTERRUPTED for p in quality.problems):
        _accuracy(base_url, model, settings, folder, label, progress, should_stop, quality)
    quality.seconds = time.monotonic() - started
    if any(p.kind is ProblemKind.INTERRUPTED for p in quality.problems):
        quality.status = "partial"
    elif quality.problems:
        quality.status = "failed" if quality.accuracy is None and not quality.answers else "partial"
    for problem in quality.problems:
        log.warning("quality of %s (%s): %s", label, problem.part, problem.message)
    return quality
