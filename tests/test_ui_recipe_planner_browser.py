"""The Recipe tab in a real browser: the known-issue warning and the memory planner next to the
command, for the CPU demo (exact, VLLM_CPU_KVCACHE_SPACE) and for DGX Spark (the nearest published
architecture offline, then a given config.json). No vLLM server is started: the planner reads files only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.test_ui_browser import _serve, _wait_for, browser  # noqa: F401 - the shared Chromium fixture

pytestmark = pytest.mark.browser

NANO_CONFIG = Path(__file__).parent / "fixtures" / "public-configs" / "nemotron-3-nano-30b-a3b.config.json"


@pytest.fixture(scope="module")
def recipe_app(tmp_path_factory, monkeypatch_module):
    from workbench.ui.app import build_app

    # Offline, with an empty Hugging Face cache: the Spark plan's config.json is not at hand.
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch_module.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
    app = build_app(state_dir=tmp_path_factory.mktemp("ui-state"), default_hardware="cpu")
    url = _serve(app)
    yield url
    app.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_known_issue_and_planner_next_to_the_command(browser, recipe_app, artifacts_dir):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(recipe_app)
    planner = page.locator("#recipe-planner")
    table = page.locator("#recipe-planner-table")
    _wait_for(lambda: "CPU KV cache size: 46,592 tokens" in planner.inner_text(), 30, "the demo's planner",
              page, artifacts_dir / "ui-planner-timeout.png")
    assert "Maximum concurrency for 4,096 tokens per request: 11.38x" in planner.inner_text()
    assert "11.38" in table.inner_text() and "4,096" in table.inner_text()

    hardware = page.locator("#recipe-hardware input")
    hardware.click()
    hardware.fill("DGX Spark")
    page.keyboard.press("Enter")
    summary = page.locator("#recipe-summary")
    _wait_for(lambda: "Known issue: --kv-cache-dtype fp8 makes engine initialisation fail" in summary.inner_text(),
              30, "the GB10 fp8 warning", page, artifacts_dir / "ui-known-issue-timeout.png")
    assert "vllm-project/recipes#836" in summary.inner_text()
    # Offline with nothing downloaded, the nearest published architecture stands in, labelled as such.
    _wait_for(lambda: "nearest published architecture" in planner.inner_text(), 30, "the planner's stand-in")
    assert "not nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4's own" in planner.inner_text()
    page.screenshot(path=str(artifacts_dir / "ui-recipe-known-issue.png"), full_page=True)

    page.get_by_role("button", name="Planner inputs").click()
    box = page.locator("#recipe-planner-config textarea, #recipe-planner-config input").first
    box.fill(str(NANO_CONFIG))
    box.press("Enter")
    _wait_for(lambda: str(NANO_CONFIG) in planner.inner_text(), 30, "the Spark plan from the given config")
    text = planner.inner_text()
    assert "128 GiB x 0.7" in text and "Mamba state:" in text and "Recommended: --max-model-len" in text
    time.sleep(0.5)
    assert "262,144" in table.inner_text()
    page.screenshot(path=str(artifacts_dir / "ui-recipe-planner.png"), full_page=True)
    page.close()
