"""The accuracy half of the quality pass, in a child process: lm-eval against one server.

    python -m workbench.experiment.lm_eval_worker REQUEST.json

Why a child process: lm-eval imports datasets and seeds the random generators of the process
it runs in, and runs its requests in its own asyncio loop (which a notebook's running loop
refuses); and a stop must end it at once (the runner stops its process group). Its log
(lm-eval's own) goes to the file the runner gives; what the runner reads are the events it
writes to the request's `events` file, one JSON object a line:

    {"event": "loading", "task": ...}
    {"event": "total", "total": N}            items to ask, once the task's data is loaded
    {"event": "answered", "done": K}          after each answer the server sent
    {"event": "result", ...}                  Accuracy.to_dict()'s fields
    {"event": "problem", "kind": ProblemKind, "message": ..., "hint": ...}

The model is lm-eval's `local-chat-completions` (no tokenizer: the server applies its chat
template), with --apply_chat_template and --fewshot_as_multiturn, temperature 0 as each task
asks. Accuracy comes from the per-item scores (log_samples): the task's first metric whose
every item scored 0 or 1, on its first filter.
"""

from __future__ import annotations

import difflib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import requests

from workbench.experiment.quality import ProblemKind

__all__ = ["HARNESS_MODEL", "main"]

HARNESS_MODEL = "local-chat-completions"
_REQUIREMENT = "lm-eval[api]==0.4.13"


class _Problem(Exception):
    def __init__(self, kind: ProblemKind, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.hint = kind, message, hint


class _Events:
    def __init__(self, path: Path) -> None:
        self.path = path

    def emit(self, event: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


class _LastWarning(logging.Handler):
    """Keeps lm-eval's last warning: when the server refuses a request, lm-eval logs the
    server's answer at WARNING (and then the exception at ERROR, which is not kept)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.text: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.WARNING:
            self.text = record.getMessage()


def _load(request: dict[str, Any], events: _Events) -> tuple[Any, dict[str, Any]]:
    """lm-eval's task manager and the tasks the request names, or a _Problem saying why not."""
    try:  # the quality extra's: its absence is reported, not raised
        from lm_eval.tasks import TaskManager
    except ImportError as exc:
        raise _Problem(ProblemKind.HARNESS_MISSING, f"lm-eval is not installed here ({exc}).",
                       f"Install it: pip install '{_REQUIREMENT}' (scripts/install.sh does).") from exc
    name = str(request["task"])
    events.emit({"event": "loading", "task": name})
    manager = TaskManager(include_path=request.get("include_path"), include_defaults=bool(request["include_defaults"]))
    if name not in manager.all_tasks and not Path(name).is_file():
        close = difflib.get_close_matches(name, manager.all_tasks, n=5)
        raise _Problem(ProblemKind.UNKNOWN_TASK, f"lm-eval has no task named {name!r}.",
                       ("Did you mean: " + ", ".join(close) + "? " if close else "")
                       + "Name a task from `lm_eval ls tasks`, a task YAML file, or the built-in workbench_basics.")
    try:
        loaded = manager.load([name])
    except OSError as exc:  # datasets raises ConnectionError (an OSError) when the Hub is out of reach
        raise _Problem(ProblemKind.TASK_DATA_MISSING,
                       f"The data of task {name!r} is not on this machine and could not be fetched: {exc}",
                       "lm-eval fetches a task's data from the Hugging Face Hub on first use and keeps it in the "
                       "Hugging Face cache: run it once where the Hub can be reached, or use the built-in task "
                       "workbench_basics (shipped with the workbench).") from exc
    except Exception as exc:  # noqa: BLE001 - lm-eval raises many kinds: say which
        raise _Problem(ProblemKind.HARNESS_FAILED, f"lm-eval could not load task {name!r}: "
                       f"{type(exc).__name__}: {exc}", "Its log (beside the results) has the details.") from exc
    tasks: dict[str, Any] = dict(loaded["tasks"])
    for task_name, task in tasks.items():
        if task.OUTPUT_TYPE != "generate_until":
            raise _Problem(ProblemKind.TASK_UNSUPPORTED,
                           f"Task {task_name!r} scores {task.OUTPUT_TYPE} (log-likelihoods), which a chat endpoint "
                           "does not give.", "Choose a task that generates answers (output_type generate_until), "
                           "e.g. gsm8k, or the built-in workbench_basics.")
    return manager, tasks


def _binary(values: Sequence[Any]) -> bool:
    return bool(values) and all(isinstance(v, (bool, int, float)) and float(v) in (0.0, 1.0) for v in values)


def _score(out: dict[str, Any], task_name: str, samples_file: Path | None) -> tuple[str, int, int, dict[str, list[int]]]:
    rows = out["samples"][task_name]
    metrics = list((out.get("higher_is_better") or {}).get(task_name) or {}) or \
        [m for r in rows[:1] for m in r.get("metrics", [])]
    filters = list(dict.fromkeys(r.get("filter", "none") for r in rows))
    for metric in metrics:
        for flt in filters:
            chosen = [r for r in rows if r.get("filter", "none") == flt]
            if not _binary([r.get(metric) for r in chosen]):
                continue
            by_kind: dict[str, list[int]] = {}
            for r in chosen:
                kind = (r.get("doc") or {}).get("kind")
                if isinstance(kind, str):
                    tally = by_kind.setdefault(kind, [0, 0])
                    tally[0] += int(float(r[metric]))
                    tally[1] += 1
            if samples_file is not None:
                with open(samples_file, "a", encoding="utf-8") as f:
                    for r in chosen:
                        f.write(json.dumps({"task": task_name, "doc_id": r.get("doc_id"), "doc": r.get("doc"),
                                            "response": (r.get("filtered_resps") or [None])[0],
                                            "target": r.get("target"), "right": int(float(r[metric]))},
                                           default=str) + "\n")
            label = metric if flt == "none" else f"{metric},{flt}"
            return label, sum(int(float(r[metric])) for r in chosen), len(chosen), by_kind
    raise _Problem(ProblemKind.TASK_UNSUPPORTED, f"Task {task_name!r} has no metric scoring each item right or "
                   f"wrong (its metrics: {', '.join(metrics) or 'none'}), so no accuracy with an interval.",
                   "Choose a task scored by exact match or accuracy, e.g. gsm8k, or the built-in workbench_basics.")


def _evaluate(request: dict[str, Any], events: _Events) -> dict[str, Any]:
    manager, tasks = _load(request, events)
    # The quality extra's (present: _load found it), and seconds to load.
    import lm_eval
    from lm_eval.api.model import CacheHook
    from lm_eval.api.registry import get_model

    limit = request.get("limit")
    total = sum(len(t.eval_docs) if limit is None else min(int(limit), len(t.eval_docs)) for t in tasks.values())
    items_in_task = sum(len(t.eval_docs) for t in tasks.values())
    events.emit({"event": "total", "total": total})

    class Progress(CacheHook):  # type: ignore[misc]  # lm-eval calls add_partial once per answer
        def __init__(self) -> None:
            super().__init__(None)
            self.done = 0

        def add_partial(self, attr: str, req: Any, res: Any) -> None:
            self.done += 1
            events.emit({"event": "answered", "done": self.done})

    lm = get_model(HARNESS_MODEL)(base_url=request["base_url"], model=request["model"], tokenizer_backend=None,
                                  tokenized_requests=False, num_concurrent=int(request["num_concurrent"]),
                                  max_retries=int(request["max_retries"]), timeout=int(request["timeout_s"]))
    lm.set_cache_hook(Progress())
    warning = _LastWarning()
    logging.getLogger("lm_eval").addHandler(warning)
    try:
        out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks.values()), task_manager=manager, limit=limit,
                                      apply_chat_template=True, fewshot_as_multiturn=True, log_samples=True,
                                      bootstrap_iters=0)
    except Exception as exc:  # noqa: BLE001 - sorted by type below
        raise _request_problem(exc, warning.text, request["base_url"]) from exc
    if out is None:
        raise _Problem(ProblemKind.HARNESS_FAILED, "lm-eval returned no results.", "Its log has the details.")
    samples = Path(request["samples"]) if request.get("samples") else None
    metric, correct, n = "", 0, 0
    by_kind: dict[str, list[int]] = {}
    for task_name in tasks:
        metric, c, k, kinds = _score(out, task_name, samples)
        correct, n = correct + c, n + k
        for kind, (right, asked) in kinds.items():
            tally = by_kind.setdefault(kind, [0, 0])
            tally[0] += right
            tally[1] += asked
    return {"task": str(request["task"]) if len(tasks) > 1 else next(iter(tasks)), "metric": metric,
            "correct": correct, "n": n, "items_in_task": items_in_task, "by_kind": by_kind,
            "samples_file": None if samples is None else samples.name}


def _request_problem(exc: Exception, last_warning: str | None, url: str) -> _Problem:
    """What went wrong while lm-eval sent its requests, by the error's type."""
    said = f" The harness's last warning: {last_warning[:400]}" if last_warning else ""
    if isinstance(exc, (aiohttp.ClientResponseError, requests.HTTPError)):
        status = getattr(exc, "status", None) or getattr(getattr(exc, "response", None), "status_code", None)
        return _Problem(ProblemKind.SERVER_REFUSED, f"The server at {url} refused the harness's requests "
                        f"(HTTP {status}).{said}", "Check that the server serves the model named in the requests "
                        "and accepts chat completions of this task's length (its max-model-len).")
    if isinstance(exc, (aiohttp.ClientConnectionError, requests.ConnectionError, ConnectionError, TimeoutError)):
        return _Problem(ProblemKind.SERVER_UNREACHABLE, f"The harness could not reach the server at {url} "
                        f"({type(exc).__name__}: {exc}).{said}", "Check that the server is still running.")
    return _Problem(ProblemKind.HARNESS_FAILED, f"lm-eval failed: {type(exc).__name__}: {exc}.{said}",
                    "Its log (beside the results) has the traceback.")


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    events = _Events(Path(request["events"]))
    try:
        result = _evaluate(request, events)
    except _Problem as problem:
        logging.getLogger("workbench.quality").error("%s: %s", problem.kind.value, problem.message, exc_info=True)
        events.emit({"event": "problem", "kind": problem.kind.value, "message": problem.message,
                     "hint": problem.hint})
        return 2
    events.emit({"event": "result", **result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
