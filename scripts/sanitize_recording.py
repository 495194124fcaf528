"""Replace the capturing machine's own paths in recorded logs before they become test fixtures.

    python scripts/sanitize_recording.py FILE...      (rewrites each file in place)

Model folders become `/models/<name>`, vLLM's install `<site>`, the Python environment
`<venv>`, caches `<cache>`, temporary files `<tmp>`, the project checkout `<checkout>`, and any
other home path `<home>`: the same placeholders as tests/fixtures/launch-logs/. Nothing else
changes, so the vLLM lines the tests match stay as vLLM wrote them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r in (
    (r"/root/\.cache/nemotron-workbench/models/", "/models/"),
    (r"/root/\.cache/nemotron-workbench/servers", "<state>"),
    (r"(?:/root|/home/[\w.-]+)/\.cache/", "<cache>/"),
    (r"/root/site\b", "<site>"),
    (r"/root/(?:tinyh|rehearsal)\b", "/models/tiny-nemotron-h"),
    (r"/opt/torch/\.venv\b", "<venv>"),
    (r"/usr/lib/python3\.\d+\b", "<python>"),
    (r"/usr/local/bin/vllm\b|/root/bin/vllm\b", "vllm"),
    (r"/tmp/[\w.%-]+", "<tmp>"),
    (r"/work/[\w.-]+(?:/[\w.-]+)?", "<checkout>"),
    (r"/root/[\w.-]+", "<home>"),
))


def sanitize(text: str) -> str:
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return text


def main(paths: list[str]) -> int:
    for name in paths:
        path = Path(name)
        before = path.read_text(errors="replace")
        after = sanitize(before)
        if after != before:
            path.write_text(after)
            print(f"{path}: paths replaced")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
