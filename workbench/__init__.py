"""Nemotron vLLM Workbench: render, launch, chat with and measure vLLM servers."""

__version__ = "0.1.0"
