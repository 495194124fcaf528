"""Small HTML pieces the notebook views share (ipywidgets.HTML values): escaped, monospace."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from workbench.errors import WorkbenchError

__all__ = ["error_html", "esc", "layer_badge", "pre", "table"]

_MONO = "font-family: var(--jp-code-font-family, monospace); font-size: 12px;"
_PRE = f"white-space: pre-wrap; word-break: break-word; margin: 0; {_MONO}"
_LAYER_COLOURS = {
    "base": "#6c757d", "variant": "#0d6efd", "strategy": "#6610f2", "hardware": "#d63384",
    "feature": "#198754", "mode": "#20c997", "preset": "#fd7e14", "user": "#dc3545", "env": "#495057",
}


def esc(text: Any) -> str:
    return html.escape(str(text))


def pre(text: str, *, height: str | None = None) -> str:
    box = f"max-height: {height}; overflow-y: auto;" if height else ""
    return f'<pre style="{_PRE} {box}">{esc(text)}</pre>'


def error_html(exc: WorkbenchError) -> str:
    hint = f"<br><i>{esc(exc.hint)}</i>" if exc.hint else ""
    return f'<div style="color: #b02a37"><b>{esc(exc.message)}</b>{hint}</div>'


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, raw: bool = False,
           column_styles: tuple[str, ...] = ("white-space: nowrap;",)) -> str:
    """An HTML table; cells are escaped unless `raw` (then they are HTML already).
    `column_styles` are extra CSS for the first columns (by default: names stay on one line)."""
    cell = (lambda v: str(v)) if raw else esc
    head = "".join(f'<th style="text-align: left; padding: 2px 8px">{esc(h)}</th>' for h in header)
    td = "padding: 1px 8px; vertical-align: top; line-height: 1.3;"
    body = "".join(
        "<tr>" + "".join(f'<td style="{td} {column_styles[i] if i < len(column_styles) else ""}">{cell(v)}</td>'
                         for i, v in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table style="border-collapse: collapse; {_MONO}"><tr>{head}</tr>{body}</table>'


def layer_badge(layer: str) -> str:
    colour = _LAYER_COLOURS.get(layer.split(":")[0], "#6c757d")
    return (f'<span style="background: {colour}; color: white; border-radius: 4px; '
            f'padding: 0 5px">{esc(layer)}</span>')
