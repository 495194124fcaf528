"""The Server tab's agent panel: "Verify endpoint" (workbench.agents.verify) and
"Connect an agent" (workbench.agents.harnesses) for the server this workbench serves."""

from __future__ import annotations

import gradio as gr

from workbench.agents.harnesses import HARNESSES, connection_for, render_harness
from workbench.agents.verify import ExpectedParsers, VerifyReport, verify_endpoint
from workbench.demo.forcing import verify_fields_for_served_model
from workbench.errors import WorkbenchError

_OUTCOME = {"pass": "pass", "fail": "FAIL", "not_applicable": "not applicable"}
_LANGUAGE = {"json": "json", "yaml": "yaml", "toml": None, "python": "python"}


def report_rows(report: VerifyReport) -> list[list[str]]:
    return [[_OUTCOME[c.outcome], c.title, c.found, c.change if c.outcome == "fail" else ""] for c in report.checks]


def report_summary(report: VerifyReport) -> str:
    field = f" · reasoning arrives in `{report.reasoning_field}`" if report.reasoning_field else ""
    if report.ok:
        return f"**All checks that apply pass** at `{report.base_url}` (model `{report.model}`){field}."
    return f"**{len(report.failed)} check(s) failed** at `{report.base_url}`: each says what to change.{field}"


def verify_slot(slot) -> tuple[str, list[list[str]]]:
    """Run the verifier against the slot's ready server, compared with the plan it was launched from."""
    base_url, model = slot.ready_server()
    if base_url is None:
        return f"⚠ {model}", []
    handle = slot.current()
    argv = (handle.plan or {}).get("argv") if handle is not None else None
    expected = ExpectedParsers.from_argv(argv) if argv else None
    report = verify_endpoint(base_url, model=model, expected=expected,
                             request_fields=verify_fields_for_served_model(model))
    return report_summary(report), report_rows(report)


def connect_text(slot, harness: str) -> tuple[str, str]:
    """(how to use it, the configuration) for `harness` and the slot's ready server."""
    base_url, model = slot.ready_server()
    if base_url is None:
        return f"⚠ {model}", ""
    handle = slot.current()
    argv = (handle.plan or {}).get("argv") if handle is not None else None
    try:
        rendered = render_harness(str(harness or ""), connection_for(base_url, model=model, server_argv=argv))
    except WorkbenchError as exc:
        return f"⚠ {exc.message} {exc.hint or ''}", ""
    notes = "\n".join(f"- {n}" for n in rendered.notes)
    head = f"**{rendered.title}** · `{rendered.file_hint}` · format {rendered.format} · [documentation]({rendered.doc_url})"
    return f"{head}\n\n{notes}", rendered.text


def create_ui(slot) -> None:
    with gr.Accordion("Agent readiness: verify the endpoint, connect an agent harness", open=False):
        gr.Markdown("Checks what agent harnesses depend on: models listed, a streamed answer, reasoning apart "
                    "from the content, reasoning off respected, a native tool call, a multi-step call, per-request "
                    "figures, and parsers matching the recipe. Same as `python -m workbench verify URL`.")
        verify_btn = gr.Button("Verify endpoint", elem_id="server-verify")
        verify_summary = gr.Markdown(elem_id="verify-summary")
        verify_table = gr.Dataframe(headers=["result", "check", "found", "what to change"], interactive=False,
                                    wrap=True, elem_id="verify-table")
        with gr.Row():
            harness = gr.Dropdown([(h.title, h.name) for h in HARNESSES.values()], value="opencode",
                                  label="Connect an agent harness", elem_id="connect-harness")
            connect_btn = gr.Button("Show its configuration", elem_id="connect-show")
        connect_notes = gr.Markdown(elem_id="connect-notes")
        connect_code = gr.Code(label="Configuration", interactive=False, elem_id="connect-config")
    verify_btn.click(lambda: verify_slot(slot), None, [verify_summary, verify_table], concurrency_limit=1,
                     api_visibility="private")
    connect_btn.click(lambda name: connect_text(slot, name), harness, [connect_notes, connect_code],
                      api_name="connect_harness")
