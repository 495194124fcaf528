"""Bad input that is not a command line: what a server, a browser's storage or a file may hold."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.chat import Conversation
from workbench.errors import WorkbenchError
from workbench.metrics import MetricsPoller, parse_metrics
from workbench.ui import chat_tab
from workbench.ui.exports import ExportFolder

RECORDED = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "vllm-0.32.0-cpu"
if not RECORDED.is_dir():
    RECORDED = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32.0-cpu"

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
# Shapes close to a real saved chat, so the checks past the first ones are reached too.
MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool", "system", "admin", 3]),
    "content": st.one_of(st.text(max_size=10), st.none(), st.integers()),
}, optional={
    "reasoning": JSON, "tool_calls": st.one_of(JSON, st.lists(JSON, max_size=2)), "stats": JSON,
    "failed": JSON, "tool_call_id": JSON, "name": JSON,
})
SAVED_CHAT = st.one_of(
    JSON,
    st.fixed_dictionaries({
        "display": st.one_of(JSON, st.lists(st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "bot"]), "content": st.one_of(st.text(max_size=5), JSON)}),
            max_size=3)),
        "conversation": st.one_of(JSON, st.fixed_dictionaries({
            "format": st.sampled_from(["workbench-conversation/1", "other"]),
            "messages": st.one_of(JSON, st.lists(MESSAGE, max_size=4))})),
    }),
)
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(SAVED_CHAT)
def test_a_saved_chat_is_read_or_refused_with_a_reason(saved):
    """Whatever a browser's storage holds: the page shows chat messages, or says why it could not."""
    display, conversation, problem = chat_tab.read_saved(saved)
    assert isinstance(conversation, Conversation)
    conversation.to_wire()  # what the next request would send
    json.dumps(conversation.to_dict(), allow_nan=False)
    shown = chat_tab.restore(saved)
    assert isinstance(shown, list)
    for message in shown:
        assert message["role"] in ("user", "assistant") and isinstance(message["content"], (str, list))
    if problem:
        assert "could not be read" in shown[0]["content"] and problem in shown[0]["content"]


@FUZZ
@given(st.one_of(JSON, st.fixed_dictionaries({"format": st.just("workbench-conversation/1"),
                                               "messages": st.lists(MESSAGE, max_size=4)})))
def test_a_conversation_file_loads_or_says_what_is_wrong(data):
    try:
        conversation = Conversation.from_dict(data)
    except WorkbenchError as exc:
        assert exc.message
        return
    for message in conversation.messages:
        assert isinstance(message.content, str)
        assert message.stats is None or all(
            v is None or isinstance(v, bool) or math.isfinite(v) for v in message.stats.to_dict().values())


def test_a_real_saved_chat_survives_the_checks():
    from workbench.chat import Message
    from workbench.chat.events import TurnStats

    conversation = Conversation([Message("user", "hi"), Message(
        "assistant", "Hello", reasoning="think", stats=TurnStats(ttft_s=0.2, total_s=1.0, usage_complete=False))])
    saved = {"display": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}],
             "conversation": conversation.to_dict()}
    display, restored, problem = chat_tab.read_saved(saved)
    assert problem is None and display == saved["display"]
    assert restored.to_dict() == conversation.to_dict()  # nothing valid is dropped, stats included


def test_metrics_json_export_writes_nan_and_infinity_as_null(tmp_path):
    """A server may expose NaN or +Inf; the JSON file must still be JSON."""
    text = (RECORDED / "metrics_under_load.prom").read_text()
    line = next(l for l in text.splitlines() if l.startswith("vllm:kv_cache_usage_perc{"))
    poller = MetricsPoller("http://127.0.0.1:1")
    try:
        poller.record(parse_metrics(text, 1000.0))
        poller.record(parse_metrics(text.replace(line, line.rsplit(" ", 1)[0] + " NaN"), 1001.0))
        poller.record(parse_metrics(text.replace(line, line.rsplit(" ", 1)[0] + " +Inf"), 1002.0))
        assert any(isinstance(v, float) and not math.isfinite(v)
                   for f in poller.figures() for v in f.to_dict().values())  # the case is real
        path = poller.export_json(tmp_path / "m.json")
    finally:
        poller.close()

    def strict(token):
        raise ValueError(f"{token} in the file")

    document = json.loads(path.read_text(), parse_constant=strict)
    assert [f["kv_cache_pct"] for f in document["figures"]][-2:] == [None, None]


def test_exports_keep_one_file_per_session_private_and_removed(tmp_path):
    exports = ExportFolder()
    alice, bob = object.__new__(type("S", (), {})), object.__new__(type("S", (), {}))
    for turn in range(5):
        exports.write_json(f"conversation-{exports.name_for(alice)}.json", {"turn": turn})
        exports.write_json(f"conversation-{exports.name_for(bob)}.json", {"turn": turn, "who": "bob"})
    files = exports.files()
    assert len(files) == 2  # five Sends each, one file each
    assert {json.loads(f.read_text()).get("who") for f in files} == {None, "bob"}
    assert stat.S_IMODE(exports.folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert not any(p.name.endswith(".tmp") for p in exports.folder.iterdir())


def test_the_apps_export_into_the_private_folder_and_gradio_cleans_its_copies():
    import gradio as gr

    from workbench.ui.exports import EXPORTS, GRADIO_CACHE_CLEANUP

    path = Path(chat_tab._export(None, None))
    assert path.parent == EXPORTS.folder
    with gr.Blocks(delete_cache=GRADIO_CACHE_CLEANUP) as demo:
        pass
    assert demo.delete_cache == GRADIO_CACHE_CLEANUP


@pytest.mark.parametrize("text,says", [
    ("--foo 'x", "No closing quotation"),
    ("--max-num-seqs \"8", "No closing quotation"),
])
def test_unbalanced_quotes_in_extra_flags_name_the_text(text, says):
    from workbench.recipes import Selection, load_catalog, render

    with pytest.raises(WorkbenchError) as caught:
        render(Selection(hardware="cpu", extra=[text]), load_catalog())
    assert says in caught.value.message and text in caught.value.message
