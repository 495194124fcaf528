"""The model card's client-side reasoning budget, second half.

The first request stopped at `budget` tokens with the reasoning still open.
Render the same prompt with the server's chat template (POST /tokenize), append
the reasoning so far and "</think>" (or the answer so far, if the answer had
begun), and let the completions API continue from there. The continuation is
plain text: the server's tool parser does not run on it, so tool calls are not
offered in it.
"""

from __future__ import annotations

from typing import Any

from workbench.chat.options import ChatOptions, deep_merge

__all__ = ["continuation_body", "continuation_prompt_ids"]


async def continuation_prompt_ids(client: Any, base_url: str, model: str, messages: list[dict[str, Any]],
                                  tools: list[dict[str, Any]], reasoning: str, answer_so_far: str) -> list[int]:
    """The token ids of the prompt, the reasoning so far, `</think>` and the answer so far."""
    template_kwargs: dict[str, Any] = {"enable_thinking": True}
    if tools:
        template_kwargs["force_nonempty_content"] = True
    tokenized = await client.post(
        f"{base_url}/tokenize", cast_to=object,
        body={"model": model, "messages": messages, "add_generation_prompt": True,
              "chat_template_kwargs": template_kwargs, **({"tools": tools} if tools else {})})
    # Nemotron's template opens "<think>\n"; the model card closes reasoning with "\n</think>\n\n".
    tail = reasoning.rstrip("\n") + "\n</think>\n\n" + answer_so_far
    tail_ids = await client.post(
        f"{base_url}/tokenize", cast_to=object,
        body={"model": model, "prompt": tail, "add_special_tokens": False})
    return list(tokenized["tokens"]) + list(tail_ids["tokens"])


def continuation_body(options: ChatOptions, model: str, prompt_ids: list[int], used_tokens: int) -> dict[str, Any]:
    """The /v1/completions request that continues from `prompt_ids` within max_tokens."""
    remaining = (options.max_tokens - used_tokens) if options.max_tokens else None
    body: dict[str, Any] = {
        "model": model, "prompt": prompt_ids, "stream": True,
        "temperature": options.temperature, "top_p": options.top_p,
    }
    if remaining is not None:
        body["max_tokens"] = max(remaining, 1)
    if options.include_usage:
        body["stream_options"] = {"include_usage": True}
    return deep_merge(body, options.extra_body)
