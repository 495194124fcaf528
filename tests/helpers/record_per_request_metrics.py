"""Record what vLLM 0.32 (CPU build) answers with per-request figures on, for the replay tests.

    python tests/helpers/record_per_request_metrics.py

Starts SmolLM2 with the CPU demo recipe's per_request_metrics + n-gram spec_decoding
flags, sends one streamed and one non-streamed request, and writes the raw SSE lines of
the stream and the JSON body to tests/fixtures/vllm-0.32.0-cpu/per_request_metrics.json.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers.vllm_servers import start_vllm_server  # noqa: E402
from tests.test_server_figures_live import QUOTE, recipe_flags  # noqa: E402
from workbench.demo.models import build_demo_model  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "vllm-0.32.0-cpu" / "per_request_metrics.json"


def main() -> None:
    model = build_demo_model().path
    flags = recipe_flags()
    server = start_vllm_server("record", model, "HuggingFaceTB/SmolLM2-135M-Instruct", Path(tempfile.mkdtemp()),
                               extra_args=flags)
    try:
        body = {"model": server.model, "max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": f"Repeat this text exactly: {QUOTE}"}]}
        with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", timeout=120,
                          json={**body, "stream": True, "stream_options": {"include_usage": True}}) as answer:
            sse = [line for line in answer.iter_lines() if line]
        plain = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120).json()
    finally:
        server.stop()
    OUT.write_text(json.dumps({"server_flags": flags, "request": body, "stream_sse_lines": sse,
                               "response": plain}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
