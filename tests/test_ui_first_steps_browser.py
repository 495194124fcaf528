"""Issue 34 in Chromium: what a first-time user tripped on, each fixed.

1. The Recipe tab, offline with nothing downloaded or built: the planner shows figures for the CPU
   demo (from its GGUF) and for DGX Spark (the nearest published architecture, said so); H100 then
   back to cpu raises no popup; on Spark "Apply the change" renders the command the known problem
   asks for (provenance "known problem gb10-fp8-kv-cache") and "Back" gives the seed's command again.
2. A server the workbench runs (the tests' fixed-rate server, started by the workbench's launcher):
   the chat shows the answer once and no approval buttons, the benchmark text wraps, the Experiment
   tab says it would start its own vLLM beside that server and offers Attach, shows each level as it
   finishes and keeps the results in experiments/<date-time> with a link; a stopped server is not
   said to be in a phase.
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.test_ui_browser import _serve, _wait_for, browser  # noqa: F401 - the shared Chromium fixture

pytestmark = pytest.mark.browser

# How far a table reaches past the right edge of its own box (0: it fits).
OVERFLOW_JS = """
(id) => {
  const root = document.getElementById(id);
  const table = root.querySelector('table');
  return Math.round(table.getBoundingClientRect().right - root.getBoundingClientRect().right);
}
"""


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def fresh_app(tmp_path_factory, monkeypatch_module):
    """Offline, an empty Hugging Face cache, no demo model built: a first run."""
    from workbench.planner import config as planner_config
    from workbench.ui.app import build_app

    root = tmp_path_factory.mktemp("first-run")
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch_module.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(root / "hf-cache"))
    monkeypatch_module.setenv("WORKBENCH_CACHE", str(root / "workbench-cache"))
    planner_config.clear_cache()
    app = build_app(state_dir=root / "state", default_hardware="cpu", experiments_dir=root / "experiments")
    url = _serve(app)
    yield app, url, root
    app.close()


def _pick_hardware(page, text: str) -> None:
    box = page.locator("#recipe-hardware input")
    box.click()
    box.fill(text)
    page.keyboard.press("Enter")


def _errors(page) -> list[str]:
    return [t for t in page.locator(".toast-body").all_inner_texts() if "Error" in t]


def test_recipe_tab_offline_first_steps(browser, fresh_app, artifacts_dir):  # noqa: F811
    _, url, _ = fresh_app
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(url)
    command = page.locator("#serve-command")
    planner = page.locator("#recipe-planner")
    summary = page.locator("#recipe-summary")
    _wait_for(lambda: "CPU KV cache size: 46,592 tokens" in planner.inner_text(), 60,
              "the demo's planner before the build", page, artifacts_dir / "first-steps-timeout.png")
    assert "not built yet" in planner.inner_text() and ".gguf" in planner.inner_text()
    assert "11.38" in page.locator("#recipe-planner-table").inner_text()
    page.screenshot(path=str(artifacts_dir / "first-steps-1-cpu-planner-before-build.png"), full_page=True)

    # Item 1: H100, then back to cpu: the CPU recipe, and no error popup.
    _pick_hardware(page, "H100")
    _wait_for(lambda: "NVFP4" in command.inner_text() and "humming" in command.inner_text(), 30, "the H100 command")
    _pick_hardware(page, "CPU (embedded demo)")
    _wait_for(lambda: "SmolLM2-135M-Instruct" in command.inner_text(), 30, "the CPU command", page,
              artifacts_dir / "first-steps-timeout.png")
    time.sleep(2)  # any late event would have raised its popup by now
    assert _errors(page) == [], _errors(page)
    assert "per_request_metrics" in page.locator("#recipe-summary").inner_text() or "SmolLM2" in summary.inner_text()
    page.screenshot(path=str(artifacts_dir / "first-steps-2-h100-back-to-cpu.png"), full_page=True)

    # Items 2 and 3 on DGX Spark: the planner's stand-in, the known problem and its change.
    _pick_hardware(page, "DGX Spark")
    _wait_for(lambda: "Known issue: --kv-cache-dtype fp8 makes engine initialisation fail" in summary.inner_text(),
              30, "the GB10 fp8 warning", page, artifacts_dir / "first-steps-timeout.png")
    _wait_for(lambda: "nearest published architecture" in planner.inner_text(), 30, "the Spark plan offline")
    assert "262,144" in page.locator("#recipe-planner-table").inner_text()
    apply = page.locator("#recipe-apply-fix")
    _wait_for(apply.is_visible, 20, "the Apply the change button")
    seed = command.inner_text()
    assert "--kv-cache-dtype fp8" in seed
    assert _errors(page) == []
    page.screenshot(path=str(artifacts_dir / "first-steps-3-spark-seed.png"), full_page=True)

    apply.click()
    _wait_for(lambda: "--kv-cache-dtype bfloat16" in command.inner_text(), 30, "the changed command", page,
              artifacts_dir / "first-steps-timeout.png")
    assert "Changed for known problem gb10-fp8-kv-cache" in summary.inner_text()
    assert "Known issue: --kv-cache-dtype fp8" not in summary.inner_text()
    provenance = page.locator("#recipe-provenance")
    _wait_for(lambda: "known problem gb10-fp8-kv-cache" in provenance.inner_text(), 20, "the fix's layer")
    assert page.evaluate(OVERFLOW_JS, "recipe-provenance") <= 1  # the "why" column is inside the page
    page.screenshot(path=str(artifacts_dir / "first-steps-4-spark-changed.png"), full_page=True)

    page.locator("#recipe-undo-fix").click()
    _wait_for(lambda: "--kv-cache-dtype fp8" in command.inner_text(), 30, "the seed's command again")
    assert command.inner_text() == seed
    page.close()


def test_server_chat_benchmark_experiment_first_steps(browser, fresh_app, artifacts_dir):  # noqa: F811
    from tests.helpers.fixed_rate_server import MODEL
    from workbench.server import free_port, start
    from workbench.server.command import ServeCommand

    app, url, root = fresh_app
    port = free_port()
    handle = start(ServeCommand(mode="local", port=port, served_model=MODEL, argv=[
        sys.executable, "-m", "tests.helpers.fixed_rate_server", "--port", str(port), "--decode-rate", "60",
        "--echo"]), state_dir=root / "state")
    handle.wait_ready(30)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("tab", name="Server").click()
        status = page.locator("#server-status")
        _wait_for(lambda: "ready" in status.inner_text(), 30, "the server's status")

        # The chat: the answer once (no second copy beside it), no approval buttons while none waits.
        page.get_by_role("tab", name="Chat").click()
        page.locator("#chat-input textarea").fill("Hello there")
        page.locator("#chat-send").click()
        _wait_for(lambda: "tok/s" in page.locator("#chat-stats").inner_text(), 60, "the answer", page,
                  artifacts_dir / "first-steps-timeout.png")
        assert page.locator("#answer-panel").count() == 0
        assert not page.locator("#mcp-deny").is_visible() and not page.locator("#mcp-approve-once").is_visible()
        page.screenshot(path=str(artifacts_dir / "first-steps-5-chat.png"), full_page=True)

        # The benchmark text wraps inside its box.
        page.get_by_role("tab", name="Benchmark").click()
        page.locator("#bench-run").click()
        _wait_for(lambda: "Done." in page.locator("#bench-progress").inner_text(), 120, "the benchmark", page,
                  artifacts_dir / "first-steps-timeout.png")
        scroller = "#bench-table .cm-scroller"
        assert page.evaluate(f"() => {{ const s = document.querySelector('{scroller}'); "
                             "return s.scrollWidth - s.clientWidth; }") <= 1
        page.screenshot(path=str(artifacts_dir / "first-steps-6-benchmark.png"), full_page=True)

        # The experiment: it says it would start its own vLLM beside the running server, and offers Attach.
        page.get_by_role("tab", name="Experiment").click()
        machine = page.locator("#exp-machine")
        _wait_for(lambda: "starts its own vLLM beside it" in machine.inner_text(), 30, "the note on the server")
        assert handle.base_url in machine.inner_text() and page.locator("#exp-attach").is_visible()
        headers = page.locator("#exp-levels-table thead").inner_text()
        assert "configuration" in headers and "acceptance (/metrics)" in headers  # no placeholder 1 2 3
        page.locator("#exp-levels input, #exp-levels textarea").first.fill("1,2,4")
        page.locator("#exp-requests input, #exp-requests textarea").first.fill("4")
        page.locator("#exp-osl input, #exp-osl textarea").first.fill("32")
        page.screenshot(path=str(artifacts_dir / "first-steps-7-experiment-beside.png"), full_page=True)
        page.locator("#exp-attach").click()
        progress = page.locator("#exp-progress")
        table = page.locator("#exp-levels-table")
        # A level's figures while the run goes on (not only at the end).
        _wait_for(lambda: "attached (" in table.inner_text(), 120, "the first level's figures", page,
                  artifacts_dir / "first-steps-timeout.png")
        assert "Done." not in progress.inner_text(), "the figures came only at the end"
        page.screenshot(path=str(artifacts_dir / "first-steps-8-experiment-first-level.png"), full_page=True)
        _wait_for(lambda: "Done." in progress.inner_text(), 180, "the experiment", page,
                  artifacts_dir / "first-steps-timeout.png")
        text = progress.inner_text()
        folder = root.resolve() / "experiments"
        assert f"Results in {folder}/" in text and "(kept)" in text
        link = page.locator("#exp-progress a", has_text="Open the report")
        report = page.request.get(f"{url}/{link.get_attribute('href')}")
        assert report.status == 200 and "<html" in report.text().lower()
        assert page.evaluate(OVERFLOW_JS, "exp-levels-table") <= 1  # the acceptance columns are on the page
        page.screenshot(path=str(artifacts_dir / "first-steps-9-experiment-done.png"), full_page=True)

        # Stopped: said as where it got to, not as its phase.
        page.get_by_role("tab", name="Server").click()
        page.locator("#server-stop").click()
        _wait_for(lambda: "stopped" in status.inner_text(), 60, "the stop")
        assert "it had reached ready" in status.inner_text() and "phase ready" not in status.inner_text()
        page.screenshot(path=str(artifacts_dir / "first-steps-10-server-stopped.png"), full_page=True)
        page.close()
    finally:
        handle.stop()
