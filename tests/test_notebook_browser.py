"""Notebook 01 in a real JupyterLab, driven by the system Chromium through Playwright.

JupyterLab runs on a copy of notebooks/ (so autosave never writes outputs into the
repository), with its config and workspace folders under tmp. The test runs the
picker cell, changes the hardware dropdown as a user would, checks the rendered
command follows, and saves a screenshot into test-artifacts/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from workbench.server import free_port
from workbench.cli.notebooks import jupyter_lab_argv, jupyter_lab_env, notebooks_dir

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium chromium-driver`")
    root = tmp_path_factory.mktemp("lab")
    work = root / "notebooks"
    shutil.copytree(notebooks_dir(), work)
    port, token = free_port(), "workbench-browser-test"
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_RUNTIME_DIR=str(root / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"), JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTER_PATH="", WORKBENCH_STATE_DIR=str(root / "state"))
    # JUPYTER_DATA_DIR moves the user's data dir only; the venv's kernels and lab extensions stay found.
    # The token and the lab defaults (no "get Jupyter news?" pop-up) as `notebooks` passes them.
    env = jupyter_lab_env(token, root / "workbench-jupyter-config", env)
    log = (root / "lab.log").open("wb")
    process = subprocess.Popen(jupyter_lab_argv(work, port), cwd=work, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, (root / "lab.log").read_text()
        try:
            if httpx.get(f"{base}/api/status", params={"token": token}, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("JupyterLab did not start:\n" + (root / "lab.log").read_text()[-3000:])
    yield base, token, work
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


def test_quickstart_picker_updates_the_command(jupyter_lab, artifacts_dir):
    from playwright.sync_api import expect, sync_playwright

    from workbench.recipes import load_catalog

    base, token, work = jupyter_lab
    spark = load_catalog().hardware["dgx_spark_gb10"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 3600})
        try:
            page.goto(f"{base}/lab/tree/01_quickstart.ipynb?token={token}")
            expect(page.locator(".jp-Notebook .jp-Cell").first).to_be_visible(timeout=60_000)
            # The status bar names the kernel once it is connected; keys pressed before then are lost.
            expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=120_000)
            # Offline and in front of a room: JupyterLab asks nothing about its news feed.
            expect(page.get_by_text("Would you like to get notified about official Jupyter news?")).to_have_count(0)
            # Run the first two code cells as a user would: click into each, Shift+Enter, wait for it.
            for n in (1, 2):
                cell = page.locator(".jp-Notebook .jp-CodeCell").nth(n - 1)
                cell.locator(".jp-InputArea-editor").click()
                expect(cell).to_have_class(re.compile("jp-mod-active"))
                page.keyboard.press("Shift+Enter")
                expect(cell.locator(".jp-InputPrompt")).to_contain_text(f"[{n}]", timeout=120_000)
            def dropdown(label: str):
                return page.locator(".widget-dropdown").filter(
                    has=page.locator("label", has_text=re.compile(f"^{label}$"))).locator("select")

            hardware = dropdown("Hardware")
            expect(hardware).to_be_visible(timeout=120_000)
            command = page.locator(".jupyter-widgets pre").first
            expect(command).to_contain_text("vllm serve HuggingFaceTB/SmolLM2-135M-Instruct", timeout=30_000)

            hardware.select_option(label=f"{spark.display_name} (dgx_spark_gb10)")
            expect(command).to_contain_text("vllm serve nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4",
                                            timeout=30_000)
            expect(command).to_contain_text("--load-format fastsafetensors")
            spec = dropdown("Spec decoding")
            spec.select_option(label="DSpark (dspark)")
            expect(command).to_contain_text('"method":"dspark"', timeout=30_000)
            expect(page.locator(".jupyter-widgets", has_text="from layer").last).to_contain_text("mode:dspark")
            picker_output = page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-OutputArea")
            picker_output.screenshot(path=str(artifacts_dir / "notebook-01-picker-dgx-spark.png"))
        finally:
            browser.close()
    # The repository's notebook is untouched: JupyterLab worked on a copy.
    assert '"outputs": []' in (notebooks_dir() / "01_quickstart.ipynb").read_text()
