"""Per-turn server figures from a real vLLM CPU server started with the CPU demo recipe's own
flags (per_request_metrics + n-gram spec_decoding): the turn's queue, prefill and decode
times and its draft acceptance reach TurnStats and the Chat tab's statistics panel.

The server (SmolLM2, real weights) is the session's `recipe_ngram_server`, shared with
tests/test_metrics_live.py."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.session_fixtures import recipe_flags
from tests.helpers.vllm_servers import RunningServer
from workbench.chat import ChatOptions, ChatSession, ErrorEvent, TurnFinished, TurnTranscript
from workbench.chat.server_metrics import request_figures_from_response
from workbench.chat.transcript import format_ms
from workbench.ui.chat_render import stats_markdown

pytestmark = pytest.mark.vllm

QUOTE = ("The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
         "The quick brown fox jumps over the lazy dog.")


def test_the_recipe_renders_per_request_figures_and_ngram_drafting() -> None:
    flags = recipe_flags()  # what the session's recipe_ngram_server runs with
    assert "--enable-per-request-metrics" in flags
    assert flags[flags.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert '"method":"ngram"' in flags[flags.index("--speculative-config") + 1]


@pytest.fixture
def figures_server(recipe_ngram_server: RunningServer) -> RunningServer:
    return recipe_ngram_server  # started once per session (tests/helpers/session_fixtures.py)


def test_the_chat_tab_shows_the_servers_own_figures(figures_server):
    session = ChatSession(figures_server.base_url, options=ChatOptions(temperature=0, max_tokens=64))
    events = list(session.stream(f"Repeat this text exactly, nothing else: {QUOTE}"))
    assert not [e for e in events if isinstance(e, ErrorEvent)]
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    stats = finished.stats
    server = stats.server
    assert server is not None and server.requests == 1
    assert server.queue_ms is not None and server.queue_ms >= 0
    assert server.prefill_ms is not None and server.prefill_ms > 0
    assert server.decode_ms is not None and server.decode_ms > 0
    # The server's decode window sits inside what the client saw of the turn.
    assert server.decode_ms / 1000 <= stats.total_s
    assert server.decode_tokens_per_s is not None and server.decode_tokens_per_s > 0
    spec = server.spec_decode
    assert spec is not None and spec.spec_steps > 0 and spec.draft_tokens > 0
    assert 0 <= spec.accepted_draft_tokens <= spec.draft_tokens
    # Copying the prompt is what n-gram drafting is for: some drafts are accepted.
    assert spec.accepted_draft_tokens > 0, spec

    transcript = TurnTranscript("q")
    for event in events:
        transcript.apply(event)
    panel = stats_markdown(transcript)
    assert "measured by the client" in panel and "measured by the server" in panel
    assert f"prefill (server): **{format_ms(server.prefill_ms)}**" in panel
    assert f"{spec.draft_tokens} drafted" in panel
    # Saved and restored with the conversation.
    assert type(stats).from_dict(stats.to_dict()) == stats


def test_non_streamed_response_carries_the_same_fields(figures_server):
    body = {"model": figures_server.model, "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": f"Repeat: {QUOTE}"}]}
    answer = httpx.post(f"{figures_server.base_url}/v1/chat/completions", json=body, timeout=120).json()
    figures = request_figures_from_response(answer)
    assert figures is not None and figures.decode_ms is not None and figures.prefill_ms is not None
    assert figures.spec_decode is not None and figures.spec_decode.spec_steps > 0
    assert figures.tokens_per_s == pytest.approx(answer["metrics"]["tokens_per_second"])
