"""Session workloads: agents' traffic, where each request carries the whole history so far.

    multiturn  N sessions at once, T turns each: every turn sends the whole history (the
               earlier user messages and the model's own answers) plus a new user message
               of `turn_input_tokens`; optional think time between an answer and the next turn
    agentic    turns shaped like a tool loop: a short assistant answer (`tool_call_tokens`,
               standing for the tool call) and a long tool result (`turn_input_tokens`, a
               `tool` message) appended, so the context grows by a set amount per step
    trace      sessions, lengths and timing from a JSONL file (load_trace; README has the format)

The first turn's prompt is built to an exact chat-formatted length (prompts.PromptBuilder),
different in every session, so the only prefix a turn can share is its own session's history:
the cache hits a run measures are the sessions' own. Later messages are random common words
(about one token each); the server's usage says what each prompt really was.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from workbench.bench.client import stream_request
from workbench.bench.config import BenchConfig, chat_body
from workbench.bench.load import USER_STOP, LoadOutcome, LoadStop, run_until_done, stop_for
from workbench.bench.prompts import WORDS, Prompt
from workbench.bench.records import RequestRecord
from workbench.errors import InputError

__all__ = ["SessionPlan", "Turn", "load_trace", "plan_sessions", "run_sessions", "session_context_estimate", "words"]

# Tokens a chat template adds around one message (role tags): subtracted when a trace
# gives a turn's whole input length and the new message's share has to be worked out.
MESSAGE_OVERHEAD_TOKENS = 5
TRACE_HINT = ("Each line is one JSON object: output_length (required), and input_length or messages; "
              "optional session_id, timestamp (ms from the start), delay (ms after the session's previous "
              "answer). See README, 'Session workloads'.")


@dataclass
class Turn:
    new_tokens: int  # the new message's length (first turn: the whole chat-formatted prompt, exact)
    output_tokens: int
    role: str = "user"  # the new message's role: user, or tool (agentic)
    delay_s: float = 0.0  # wait after the session's previous answer
    at_s: float | None = None  # not before this long after the run's start (a trace's timestamp)
    input_length: int | None = None  # a trace's whole input length for this turn
    messages: list[dict[str, Any]] | None = None  # a trace's verbatim messages, sent as they are


@dataclass
class SessionPlan:
    session: int
    turns: list[Turn] = field(default_factory=list)


def session_context_estimate(plan: SessionPlan) -> int:
    """About how many tokens a session's last turn holds (prompt + output), before running it."""
    context = 0
    for number, turn in enumerate(plan.turns, 1):
        if turn.messages is not None or turn.input_length is not None:
            context = turn.input_length or 0  # a trace says the whole input (messages: unknown here)
        elif number == 1:
            context = turn.new_tokens
        else:
            context += turn.new_tokens + 2 * MESSAGE_OVERHEAD_TOKENS  # the answer's and the new message's tags
        context += turn.output_tokens
    return context


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, count)))


def plan_sessions(config: BenchConfig) -> list[SessionPlan]:
    """The sessions a config asks for (trace: read from its file)."""
    if config.workload == "trace":
        assert config.trace_file is not None  # BenchConfig checks it
        return load_trace(config.trace_file)
    role = "tool" if config.workload == "agentic" else "user"
    plans = []
    for s in range(config.sessions):
        turns = [Turn(config.input_tokens, config.output_tokens_for_turn(1))]
        turns += [Turn(config.turn_input_tokens, config.output_tokens_for_turn(t), role, config.think_time_s)
                   for t in range(2, config.turns + 1)]
        plans.append(SessionPlan(s, turns))
    return plans


def _positive_int(row: dict[str, Any], key: str, where: str) -> int | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or value != int(value):
        raise InputError(f"{where}: {key} must be a whole number of at least 1, not {value!r}.", hint=TRACE_HINT)
    return int(value)


def _seconds(row: dict[str, Any], key: str, where: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"{where}: {key} must be milliseconds (0 or more), not {value!r}.", hint=TRACE_HINT)
    return float(value) / 1000


def _trace_turn(row: Any, where: str) -> Turn:
    if not isinstance(row, dict):
        raise InputError(f"{where}: a line must be a JSON object, not {type(row).__name__}.", hint=TRACE_HINT)
    output = _positive_int(row, "output_length", where)
    if output is None:
        raise InputError(f"{where}: output_length is missing.", hint=TRACE_HINT)
    input_length = _positive_int(row, "input_length", where)
    messages = row.get("messages")
    if row.get("text_input") is not None:
        messages = [{"role": "user", "content": str(row["text_input"])}]
    if messages is not None and (not isinstance(messages, list) or not messages
                                 or not all(isinstance(m, dict) and "role" in m for m in messages)):
        raise InputError(f"{where}: messages must be a non-empty list of chat messages (role, content).",
                             hint=TRACE_HINT)
    if (input_length is None) == (messages is None):
        raise InputError(f"{where}: give exactly one of input_length or messages (or text_input).",
                             hint=TRACE_HINT)
    return Turn(new_tokens=input_length or 1, output_tokens=output, delay_s=_seconds(row, "delay", where) or 0.0,
                at_s=_seconds(row, "timestamp", where), input_length=input_length, messages=messages)


async def _sleep_at_least(seconds: float) -> None:
    """asyncio.sleep, but never short: uvloop's timers run on a clock cached once per loop turn
    (milliseconds), so a think time could end a fraction of a millisecond early."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(left)


def load_trace(path: Path | str) -> list[SessionPlan]:
    """Sessions from a JSONL trace (aiperf's mooncake_trace fields; hash_ids are not used)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError as exc:
        raise InputError(f"No such trace file: {path}", hint="Give a JSONL trace file.",
                             settings=("trace_file",)) from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"Cannot read the trace {path}: {exc}", hint="Give a JSONL text file.",
                             settings=("trace_file",)) from exc
    sessions: dict[str, SessionPlan] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{where} is not JSON ({exc}).", hint=TRACE_HINT) from exc
        turn = _trace_turn(row, where)
        key = str(row["session_id"]) if row.get("session_id") is not None else f"line {number}"
        plan = sessions.setdefault(key, SessionPlan(len(sessions)))
        plan.turns.append(turn)
    if not sessions:
        raise InputError(f"The trace {path} has no requests.", hint=TRACE_HINT)
    return list(sessions.values())


# (session, exact chat-formatted length) -> that session's first prompt.
FirstPrompt = Callable[[int, int], Awaitable[Prompt]]


async def run_sessions(
    http: aiohttp.ClientSession,
    url: str,
    config: BenchConfig,
    model: str,
    plans: list[SessionPlan],
    first_prompt: FirstPrompt,
    first_index: int,
    on_record: Callable[[RequestRecord], None],
    should_stop: Callable[[], bool] | None = None,
) -> LoadOutcome:
    """Every session at once, each turn after the previous answer; records carry session and turn."""
    records: list[RequestRecord] = []
    stopped: list[LoadStop] = []
    sent = [0]
    started = time.monotonic()

    def stop_now() -> bool:
        if not stopped and should_stop is not None and should_stop():
            stopped.append(USER_STOP)
        return bool(stopped)

    async def one_session(plan: SessionPlan) -> None:
        rng = random.Random(config.seed * 1_000_003 + 7919 * (plan.session + 1))
        history: list[dict[str, Any]] = []
        previous: RequestRecord | None = None
        for number, turn in enumerate(plan.turns, 1):
            wait = turn.delay_s if number > 1 else 0.0
            if turn.at_s is not None:
                wait = max(wait, started + turn.at_s - time.monotonic())
            if wait > 0:
                await _sleep_at_least(wait)
            elif number > 1:
                await asyncio.sleep(0)  # behind the other sessions' chunks already read (see load.py's user)
            if stop_now():
                return
            target: int | None = None
            if turn.messages is not None:
                messages = turn.messages
            elif number == 1 or previous is None:
                prompt = await first_prompt(plan.session, turn.new_tokens)
                messages, target = prompt.messages, prompt.input_tokens
            else:
                new = turn.new_tokens
                if turn.input_length is not None:  # a trace gives the whole input: the new part is the rest
                    context = (previous.prompt_tokens or 0) + (previous.completion_tokens or 0)
                    new = turn.input_length - context - MESSAGE_OVERHEAD_TOKENS
                message: dict[str, Any] = {"role": turn.role, "content": words(rng, new)}
                if turn.role == "tool":
                    message["tool_call_id"] = f"call_{plan.session}_{number - 1}"
                messages = [*history, message]
            body = json.dumps(chat_body(config, model, messages, turn.output_tokens)).encode()
            answer: list[str] = []
            index = first_index + sent[0]
            sent[0] += 1
            record = await stream_request(http, url, body, index, target, answer)
            record.session, record.turn = plan.session, number
            records.append(record)
            on_record(record)
            gone = stop_for(record)
            if gone is not None and not stopped:
                stopped.append(gone)
            if not record.ok:
                return  # without its answer the session has no history to go on with
            history = [*messages, {"role": "assistant", "content": "".join(answer)}]
            previous = record

    async def start(tasks: list[asyncio.Task[None]]) -> None:
        tasks.extend(asyncio.create_task(one_session(plan)) for plan in plans)

    await run_until_done(start, stopped)
    records.sort(key=lambda r: (r.session or 0, r.turn or 0))
    dropped = max(0, sent[0] - len(records))
    return LoadOutcome(records, stopped[0] if stopped else None, dropped)
