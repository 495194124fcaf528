"""The CPU demo: models built locally with no network, and forcing a random-weight
model through vLLM's real reasoning and tool-call parsers.

    models.py   SmolLM2-135M-Instruct from a packaged GGUF; the tiny forcing model
    forcing.py  request fields that force an exact text; the forcing model's plan
"""
