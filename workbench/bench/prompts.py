"""Synthetic prompts of an exact input length, counted by the model's own tokenizer.

A prompt is random common words (seeded, different for every request, so prefix
caching cannot shortcut prefill). Its length is the *chat-formatted* prompt's
(template, system prompt and generation prompt included): the number the server
reports as usage.prompt_tokens. Words are added or removed until the count equals
the target. Who counts:

    the server's POST /tokenize      vLLM has it: the count is the server's own
    the model's tokenizer files      servers without /tokenize (TensorRT-LLM's
                                     trtllm-serve): a local folder (--tokenizer PATH)
                                     or the model's files in the Hugging Face cache

Either way every request's usage.prompt_tokens is checked against the target after
the run (BenchResult.input_length_mismatches), so a counter that disagrees with the
server shows.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from workbench.errors import BenchError

__all__ = ["Prompt", "PromptBuilder", "TokenCounter", "WORDS", "choose_counter", "local_counter", "server_counter"]

Messages = list[dict[str, str]]

# Common words; most are one token in byte-level BPE vocabularies.
WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect use class control care field development role effort rate heart drug "
    "show leader light voice wife police mind price report decision son view relationship town "
    "road arm difference value building action model season society tax director position "
    "player record paper space ground form event official matter center couple site project "
    "activity star table need court oil situation cost industry figure street image phone data "
    "picture practice piece land product doctor wall patient worker news test movie north love "
    "support technology step baby computer type attention film tree source organization hair "
    "window evidence population truth green blue red small large quick bright river stone"
).split()

MAX_ATTEMPTS = 48


@dataclass(frozen=True)
class Prompt:
    messages: Messages
    input_tokens: int  # the chat-formatted length the counter reported


@dataclass(frozen=True)
class TokenCounter:
    """Counts a chat-formatted prompt; `source` says who counts (shown with the result)."""

    source: str
    count: Callable[[Messages], Awaitable[int]]


class _NoTokenize(Exception):
    """The server has no /tokenize (404/405/501)."""


def server_counter(session: aiohttp.ClientSession, base_url: str, model: str,
                   chat_template_kwargs: dict[str, Any] | None) -> TokenCounter:
    async def count(messages: Messages) -> int:
        body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        try:
            async with session.post(f"{base_url}/tokenize", json=body) as response:
                status, text = response.status, await response.text(errors="replace")
        except (aiohttp.ClientError, OSError) as exc:
            raise BenchError(f"POST {base_url}/tokenize failed: {type(exc).__name__}: {exc}") from exc
        if status in (404, 405, 501):
            raise _NoTokenize(text[:200])
        if status != 200:
            raise BenchError(f"POST {base_url}/tokenize answered {status}: {text[:300]}",
                                 hint="Give the model's tokenizer folder to count locally.", settings=("tokenizer",))
        try:
            return int(json.loads(text)["count"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"POST {base_url}/tokenize answered something other than a count: {text[:200]!r}",
                                 hint="Give the model's tokenizer folder to count locally.", settings=("tokenizer",)) from exc

    return TokenCounter(f"the server's /tokenize ({base_url})", count)


def local_counter(name_or_path: str, chat_template_kwargs: dict[str, Any] | None) -> TokenCounter:
    """The model's own tokenizer and chat template, from a folder or the Hugging Face cache (no download)."""
    try:
        from transformers import AutoTokenizer  # optional here, and 1.5 s to load: only to count locally
    except ImportError as exc:  # pragma: no cover - transformers comes with vLLM
        raise BenchError("Counting input tokens locally needs `transformers`.",
                             hint="pip install transformers (vLLM installs it).") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BenchError(
            f"Could not load a tokenizer from {name_or_path!r}: {exc}".splitlines()[0],
            hint="Give a tokenizer folder: one with the model's tokenizer.json and tokenizer_config.json "
            "(or download the model into the Hugging Face cache first).",
            settings=("tokenizer",),
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise BenchError(f"The tokenizer at {name_or_path!r} has no chat template, so the chat-formatted "
                             "length the server will see cannot be counted.",
                             hint="Give the served model's own tokenizer folder.", settings=("tokenizer",))
    kwargs = dict(chat_template_kwargs or {})

    async def count(messages: Messages) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_dict=False, **kwargs)
        return len(ids)

    where = name_or_path if Path(name_or_path).exists() else f"{name_or_path} (Hugging Face cache)"
    return TokenCounter(f"the model's tokenizer, {where}", count)


async def choose_counter(session: aiohttp.ClientSession, base_url: str, model: str, tokenizer: str | None,
                         chat_template_kwargs: dict[str, Any] | None) -> TokenCounter:
    """The given tokenizer if any; else the server's /tokenize; else the model's tokenizer from the HF cache."""
    if tokenizer is not None:
        return local_counter(tokenizer, chat_template_kwargs)
    server = server_counter(session, base_url, model, chat_template_kwargs)
    try:
        await server.count([{"role": "user", "content": WORDS[0]}])
        return server
    except _NoTokenize:
        pass
    try:
        return local_counter(model, chat_template_kwargs)
    except BenchError as exc:
        raise BenchError(
            f"{base_url} has no /tokenize (TensorRT-LLM's trtllm-serve has none), and no tokenizer for "
            f"{model!r} is in the Hugging Face cache, so exact input lengths cannot be counted.",
            hint="Give the served model's tokenizer folder (tokenizer.json, tokenizer_config.json).",
            settings=("tokenizer",),
        ) from exc


class PromptBuilder:
    """Builds prompts of exactly `input_tokens` chat-formatted tokens, counted by `counter`."""

    def __init__(self, counter: TokenCounter, input_tokens: int, seed: int = 0) -> None:
        self.counter = counter
        self.input_tokens = input_tokens
        self.seed = seed
        self._overhead: int | None = None

    async def count(self, messages: Messages) -> int:
        return await self.counter.count(messages)

    async def overhead(self) -> int:
        """Tokens the chat template adds around a one-word user message, minus that word."""
        if self._overhead is None:
            self._overhead = await self.count([{"role": "user", "content": WORDS[0]}]) - 1
            if self.input_tokens <= self._overhead:
                raise BenchError(
                    f"An input of {self.input_tokens} tokens is shorter than the chat template alone "
                    f"({self._overhead + 1} tokens for a one-word message).",
                    hint=f"Choose an input of {self._overhead + 8} tokens or more.",
                    settings={"input_tokens": self._overhead + 8},
                )
        return self._overhead

    async def build(self, index: int) -> Prompt:
        rng = random.Random(self.seed * 1_000_003 + index)
        target = self.input_tokens
        n = max(1, target - await self.overhead())
        words = [rng.choice(WORDS) for _ in range(n + 32)]
        tried: set[int] = set()
        for _ in range(MAX_ATTEMPTS):
            while len(words) < n:
                words.append(rng.choice(WORDS))
            messages = [{"role": "user", "content": " ".join(words[:n])}]
            count = await self.count(messages)
            if count == target:
                return Prompt(messages, count)
            tried.add(n)
            step = target - count
            if n + step in tried:
                # A multi-token word makes the count jump past the target: change
                # the last word instead of the length, then try again.
                words[n - 1] = rng.choice(WORDS)
                step = 0
            n = max(1, n + step)
        raise BenchError(
            f"Could not build a prompt of exactly {target} tokens in {MAX_ATTEMPTS} tries.",
            hint="Try a slightly different input length.",
            settings=("input_tokens",),
        )
