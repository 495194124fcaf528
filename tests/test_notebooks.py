"""The companion notebooks: stripped in git, and executed top to bottom against vLLM's CPU build.

The live tests run the notebooks in order in one state directory, as a workshop
would: 01 launches the CPU demo server and, with WORKBENCH_KEEP_SERVER=1, leaves
it for 02-05 to reuse; 02 and 03 start (and stop) their own special servers; the
last notebook runs without the variable. Whatever is left is stopped at the end.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 900


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)


def test_the_five_notebooks_exist():
    assert NOTEBOOKS == [
        "01_quickstart",
        "02_reasoning_and_tools",
        "03_speculative_decoding",
        "04_throughput_and_benchmark",
        "05_dgx_spark_workshop",
    ]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stripped_valid_and_explained(name):
    nb = read(name)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "outputs must be stripped in git"
            # plain Python (top-level await allowed, as in IPython): no magics a newcomer would have to know
            compile(cell.source, name, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            assert len(cell.source.splitlines()) <= 25, f"a cell of {name} is too long to follow:\n{cell.source}"
    # every code cell comes after an explanation, or continues a short one
    for before, cell in zip(nb.cells, nb.cells[1:]):
        if cell.cell_type == "code" and before.cell_type == "code":
            assert len(before.source.splitlines()) + len(cell.source.splitlines()) < 30, name


def test_notebooks_use_the_package_api_not_raw_http():
    # Views go through the workbench; only notebook 01/03 show the OpenAI client on purpose.
    for name in NOTEBOOKS:
        text = "\n".join(c.source for c in read(name).cells if c.cell_type == "code")
        assert "import httpx" not in text and "import requests" not in text, name
        assert "subprocess" not in text, name


# ── executed against the real vLLM CPU build ─────────────────────────────────


def _texts(nb: nbformat.NotebookNode) -> list[str]:
    """What a user reads under each code cell: printed text, plain and HTML results."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.outputs:
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                parts.append(o.data.get("text/html", "") + o.data.get("text/plain", ""))
        out.append("\n".join(parts))
    return out


def _widget_values(nb: nbformat.NotebookNode) -> str:
    """The values of the widgets the notebook drew (nbclient stores their final state)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return json.dumps(state.get("state", {}))


@pytest.fixture(scope="module")
def notebook_state_dir(tmp_path_factory):
    """One state dir for the whole run, so the notebooks find each other's servers."""
    from workbench import server

    state_dir = tmp_path_factory.mktemp("workbench-state")
    yield state_dir
    for handle in server.list_servers(state_dir):
        if handle.status is not server.Status.STOPPED and handle.is_alive():
            handle.stop()
    assert not [h for h in server.list_servers(state_dir) if h.is_alive()], "a notebook server was left running"


def execute(name: str, state_dir: Path, keep: bool, artifacts_dir: Path, monkeypatch) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    # The kernel inherits this process's environment.
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(state_dir))
    if keep:
        monkeypatch.setenv("WORKBENCH_KEEP_SERVER", "1")
    else:
        monkeypatch.delenv("WORKBENCH_KEEP_SERVER", raising=False)
    nb = read(name)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S, allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, artifacts_dir / f"executed-{name}.ipynb")  # to read what happened
    return nb


def _demo_servers(state_dir: Path) -> list:
    """Launches of the demo model (notebook 04's experiment attaches to it: that record is not a launch)."""
    from workbench import server

    return [h for h in server.list_servers(state_dir)
            if h.model == "HuggingFaceTB/SmolLM2-135M-Instruct" and "--speculative-config" not in h.argv
            and h.mode != "attach"]


def _spec_servers(state_dir: Path) -> list:
    from workbench import server

    return [h for h in server.list_servers(state_dir) if "--speculative-config" in h.argv]


@pytest.mark.vllm
def test_01_quickstart(notebook_state_dir, artifacts_dir, monkeypatch):
    nb = execute("01_quickstart", notebook_state_dir, True, artifacts_dir, monkeypatch)
    texts = _texts(nb)
    text = "\n".join(texts)
    assert "Detected hardware: cpu" in text
    assert "vllm serve HuggingFaceTB/SmolLM2-135M-Instruct" in text  # the rendered command
    assert "--max-model-len                          from base" in text  # provenance, as text
    assert "Ready at http://127.0.0.1:" in text
    answer = re.search(r"^Answer: (.+)$", text, re.MULTILINE)
    assert answer and len(answer.group(1).strip()) > 3, text
    assert "Reasoning: (none: this server has no reasoning parser)" in text
    assert "Left running for the next notebook" in texts[-1]
    assert "vllm serve" in _widget_values(nb)  # the picker's command widget
    # The memory planner, and its prediction next to what the launched vLLM logged: the same line.
    assert "vLLM should log: CPU KV cache size: 46,592 tokens" in text
    said = re.search(r"^vLLM said:\s+(.+)$", text, re.MULTILINE)
    predicted = re.search(r"^planner said:\s+(.+)$", text, re.MULTILINE)
    assert said and predicted and said.group(1) == predicted.group(1), text
    assert "Memory planner" in _widget_values(nb)  # the picker's planner widget
    # The H200 command as Kubernetes manifests, validated offline, the container running that command.
    assert "3 check(s), valid" in text and "The container runs the rendered command: True" in text
    assert len(_demo_servers(notebook_state_dir)) == 1


@pytest.mark.vllm
def test_02_reasoning_and_tools(notebook_state_dir, artifacts_dir, monkeypatch):
    nb = execute("02_reasoning_and_tools", notebook_state_dir, True, artifacts_dir, monkeypatch)
    text = "\n".join(_texts(nb))
    assert "--reasoning-parser nemotron_v3" in text
    assert "reasoning: The user asks for the capital of France. That is Paris." in text
    assert "answer: The capital of France is Paris." in text
    assert "sent: {'enable_thinking': False}" in text
    assert "reasoning: '' | answer: Paris." in text
    budget = dict(re.findall(r"reasoning_budget=(\w+): (\d+) reasoning tokens", text))
    assert budget["None"] == "40" and int(budget["5"]) <= 5
    assert "empty_answer - " in text and "fix: Raise max_tokens to" in text
    assert "finish: stop | answer: Yes, 17 is prime." in text
    assert "answer: Each of you pays 23.00 for dinner, and 3 GPU hours cost 7.50." in text
    assert "messages: ['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant']" in text
    # the MCP section: the example server's tool, called through vLLM's parser, approved in code
    assert "MCP servers: ['workbench.demo.mcp_example']" in text
    assert "MCP call: gpu_hours_cost -> {\"hours\": 4.0, \"cost\": 10.0} (approved once)" in text
    assert "answer: 4 GPU hours cost 10.00." in text
    widgets = _widget_values(nb)
    assert "calculate_tip" in widgets and "gpu_hours_cost" in widgets and "per_person" in widgets
    assert "Stopped the server this notebook started" in text


def _lead_phrase(summary: dict, label: str = "ngram", baseline: str = "off") -> str:
    """How `label` did against `baseline` on per-user decode, from experiment.json's levels, in the
    words the crossover sentence uses (ahead at every level, never, behind then ahead, stops paying)."""
    decode = {c["label"]: {lv["concurrency"]: lv["decode_per_user_tps"] for lv in c["levels"] if "partial" not in lv}
              for c in summary["configs"]}
    ratios = [(c, decode[label][c] / decode[baseline][c]) for c in sorted(decode[label]) if c in decode[baseline]]
    assert ratios, summary
    ahead = [ratio >= 1.0 for _, ratio in ratios]
    if all(ahead):
        return f"{label} is ahead of {baseline} on per-user decode"
    if not any(ahead):
        return f"{label} never pays at the levels measured"
    if not ahead[0]:
        return f"{label} is behind {baseline} at concurrency {ratios[0][0]} and ahead from"
    return f"{label} stops paying at concurrency {next(c for c, ratio in ratios if ratio < 1.0)}"


@pytest.mark.vllm
def test_03_speculative_decoding(notebook_state_dir, artifacts_dir, monkeypatch):
    demo_running = len([h for h in _demo_servers(notebook_state_dir) if h.is_alive()])  # notebook 01's, if it ran
    nb = execute("03_speculative_decoding", notebook_state_dir, True, artifacts_dir, monkeypatch)
    text = "\n".join(_texts(nb))
    assert "Rendering for dgx_spark_gb10 (this machine: cpu)" in text
    assert '"method":"mtp"' in text and '"method":"dspark"' in text and '"method":"dflash"' in text
    assert '--speculative-config \'{"method":"ngram","num_speculative_tokens":4' in text
    # A real off-vs-ngram experiment: both launched in turn, measured at two levels, then stopped.
    assert "Each experiment server was stopped when its sweep ended: ['done', 'done']" in text
    agreement = re.findall(r"ngram at concurrency (\d): acceptance ([\d.]+)% from the responses, ([\d.]+)% from /metrics",
                           text)
    assert [level for level, _, _ in agreement] == ["1", "2"], text
    for _, responses, metrics in agreement:
        assert float(metrics) > 0 and abs(float(responses) - float(metrics)) <= 0.05 * float(metrics)
    assert "per draft position (/metrics):" in text and "report.html" in text
    # Quality beside speed: ngram's answers against off's at temperature 0, and lm-eval's accuracy for both.
    assert re.search(r"^off: agreement reference; accuracy \d+ % \(\d+-\d+ %, n=6\); quality: reference$", text,
                     re.MULTILINE), text
    ngram = re.search(r"^ngram: agreement (\d+) % identical \((\d)/3\); common prefix ([\d.]+) of ([\d.]+) tokens; "
                      r"accuracy \d+ % \(\d+-\d+ %, n=6\); quality: (no loss|better|loss)$", text, re.MULTILINE)
    assert ngram, text
    assert float(ngram.group(3)) <= float(ngram.group(4)) and (ngram.group(2) != "3" or ngram.group(3) == ngram.group(4))
    # The SLO search on the same servers: each configuration's capacity said plainly, then who serves more.
    said = re.findall(r"^(off|ngram) (?:serves (?:at least )?\d+ users? within the SLO|misses the SLO at concurrency 1)",
                      text, re.MULTILINE)
    assert sorted(said) == ["ngram", "off"], text
    assert re.search(r"^(Winner: |No winner: |No configuration met the SLO)", text, re.MULTILINE), text
    assert "off: probes at ['concurrency 1" in text and "ngram: probes at ['concurrency 1" in text
    widgets = _widget_values(nb)  # the ExperimentView: the SLO answer, winners table, levels, quality
    assert "How many users within the SLO" in widgets and "stroke-dasharray" in widgets  # the objective's line
    assert "winner" in widgets and "per-user decode tok/s" in widgets
    # Whether ngram pays on this shared 2-core CPU is measured, not known: the view says what the figures say.
    report = re.search(r"one self-contained HTML file: (\S+)/report\.html", text)
    assert report, text
    assert _lead_phrase(json.loads((Path(report.group(1)) / "experiment.json").read_text())) in widgets
    assert "agreement with the reference" in widgets and "at that speed" in widgets
    # The experiment's servers (off, ngram) were stopped; only the demo server runs, as before.
    assert len([h for h in _demo_servers(notebook_state_dir) if h.is_alive()]) == demo_running
    assert not [h for h in _spec_servers(notebook_state_dir) if h.is_alive()]


@pytest.mark.vllm
def test_04_throughput_and_benchmark(notebook_state_dir, artifacts_dir, monkeypatch):
    nb = execute("04_throughput_and_benchmark", notebook_state_dir, True, artifacts_dir, monkeypatch)
    text = "\n".join(_texts(nb))
    peak = re.search(r"peak decode: ([\d.]+) tok/s; burst output: ([\d.]+) tok/s", text)
    assert peak and float(peak.group(1)) > 0 and float(peak.group(2)) > 0
    assert "does not fit this server's max-model-len of 4096" in text
    assert "NVIDIA DGX Spark (GB10)" in text and "this machine: cpu" in text  # both machines named
    assert "Measured on a DGX Spark" in text and "recipes.vllm.ai" in text  # the source, not the model card
    widgets = _widget_values(nb)
    assert "ttft_ms" in widgets and "decode tok/s" in widgets
    # The agents' section: each turn resends the session, so the cache serves more of it.
    cached = re.search(r"cached tokens by turn: \[([\d, ]+)\]", text)
    assert cached, text
    by_turn = [int(x) for x in cached.group(1).split(",")]
    assert len(by_turn) == 4 and by_turn == sorted(by_turn) and by_turn[-1] > by_turn[0]
    rates = re.search(r"hit rate from the requests: ([\d.]+)%; from /metrics: ([\d.]+)%", text)
    assert rates and abs(float(rates.group(1)) - float(rates.group(2))) <= 2.0
    assert re.search(r"concurrency 4: [\d.]+ tok/s per user, [\d.]+ tok/s in total", text)  # the experiment
    assert len(_demo_servers(notebook_state_dir)) == 1


@pytest.mark.vllm
def test_05_dgx_spark_workshop(notebook_state_dir, artifacts_dir, monkeypatch):
    nb = execute("05_dgx_spark_workshop", notebook_state_dir, False, artifacts_dir, monkeypatch)
    text = "\n".join(_texts(nb))
    assert "GPU: missing (no NVIDIA GPU" in text
    assert "memory (unified, /proc/meminfo):" in text and "GB MemTotal" in text
    assert "--load-format fastsafetensors" in text and "docker run" in text
    assert "we launch the CPU engine instead" in text
    assert "known issue: --kv-cache-dtype fp8 makes engine initialisation fail on DGX Spark" in text
    assert "source: https://github.com/vllm-project/recipes/issues/836" in text
    # Offline, nothing downloaded: planned from the nearest published architecture, said so, and how to get the real one.
    assert "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4 on dgx_spark_gb10  (config.json from the nearest " \
        "published architecture" in text
    assert "Planned with NVIDIA Nemotron 3 Nano 30B-A3B's architecture, not nvidia/NVIDIA-Nemotron" in text
    assert "hf download nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4 config.json" in text
    assert re.search(r"^recommended: --max-model-len \d+ --max-num-seqs \d+", text, re.MULTILINE), text
    said = re.search(r"^vLLM said:\s+(.+)$", text, re.MULTILINE)
    predicted = re.search(r"^planner said:\s+(.+)$", text, re.MULTILINE)
    assert said and predicted and said.group(1) == predicted.group(1), text
    answer = re.search(r"^answer: (.+)$", text, re.MULTILINE)
    assert answer and len(answer.group(1).strip()) > 3
    assert re.search(r"8 requests, [\d.]+ output tok/s", text)
    assert len(_demo_servers(notebook_state_dir)) == 1  # launched once, by notebook 01
