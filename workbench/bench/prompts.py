"""Synthetic prompts of an exact input length, counted by the server itself.

A prompt is random common words (seeded, different for every request, so prefix
caching cannot shortcut prefill). Its length is what the server's own
`POST /tokenize` says the *chat-formatted* prompt is (template, system prompt and
generation prompt included) — the number vLLM reports as usage.prompt_tokens.
Words are added or removed until that count equals the target.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import httpx

from workbench.errors import WorkbenchError

__all__ = ["Prompt", "PromptBuilder", "WORDS"]

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
    messages: list[dict[str, str]]
    input_tokens: int  # the chat-formatted length the server's tokenizer reported


class PromptBuilder:
    """Builds prompts of exactly `input_tokens` chat-formatted tokens for one server."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        input_tokens: int,
        chat_template_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.model = model
        self.input_tokens = input_tokens
        self.chat_template_kwargs = chat_template_kwargs
        self.seed = seed
        self._overhead: int | None = None

    async def count(self, messages: list[dict[str, str]]) -> int:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        try:
            response = await self.client.post(f"{self.base_url}/tokenize", json=body)
        except httpx.HTTPError as exc:
            raise WorkbenchError(f"POST {self.base_url}/tokenize failed: {exc}") from exc
        if response.status_code != 200:
            raise WorkbenchError(
                f"POST {self.base_url}/tokenize answered {response.status_code}: {response.text[:300]}",
                hint="Exact input lengths need the server's /tokenize endpoint (vLLM's OpenAI server has it).",
            )
        return int(response.json()["count"])

    async def overhead(self) -> int:
        """Tokens the chat template adds around a one-word user message, minus that word."""
        if self._overhead is None:
            self._overhead = await self.count([{"role": "user", "content": WORDS[0]}]) - 1
            if self.input_tokens <= self._overhead:
                raise WorkbenchError(
                    f"An input of {self.input_tokens} tokens is shorter than the chat template alone "
                    f"({self._overhead + 1} tokens for a one-word message).",
                    hint=f"Choose --isl {self._overhead + 8} or more.",
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
        raise WorkbenchError(
            f"Could not build a prompt of exactly {target} tokens in {MAX_ATTEMPTS} tries.",
            hint="Try a slightly different --isl.",
        )
