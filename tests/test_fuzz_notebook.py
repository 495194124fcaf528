"""Fuzz the notebook entry points: the recipe picker's widgets and the views' constructors
with hostile values. Nothing may raise but a WorkbenchError, and a notebook cell shows
that one as its cause and hint, not as a traceback."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.errors import WorkbenchError
from workbench.server import free_port

CLOSED = f"http://127.0.0.1:{free_port()}"
URLS = ["", " ", "http://[::1", "http://999.1.1.1", "\x1b", "\x80", "ftp://x", "http://127.0.0.1:0", CLOSED,
        "127.0.0.1:99999", "javascript:alert(1)"]
TEXT = st.one_of(st.sampled_from(["--foo 'x", "--host 0.0.0.0", "--max-num-seqs -1", "\x00", "x" * 3000, ""]),
                 st.text(max_size=30))
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FUZZ
@given(extra=TEXT, choice=st.sampled_from(["", "nosuch", "cpu", "h200", "default", "bf16", "mtp", "none"]))
def test_the_recipe_picker_shows_bad_input_as_a_message(extra, choice):
    from workbench.notebook import RecipePicker

    picker = RecipePicker()
    picker.extra.value = extra
    for dropdown in (picker.spec, picker.preset, picker.strategy, picker.variant):
        try:
            dropdown.value = choice  # a value not in its options is refused by ipywidgets itself
        except Exception as exc:  # noqa: BLE001 - traitlets' TraitError
            assert "TraitError" in type(exc).__name__
    plan = picker.refresh()
    if plan is None:
        assert isinstance(picker.error, WorkbenchError) and picker.error.message in picker.summary.value.replace(
            "&#x27;", "'").replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")


@FUZZ
@given(url=st.sampled_from(URLS))
def test_the_views_refuse_a_bad_url_with_a_reason(url):
    from workbench.chat import ChatSession
    from workbench.notebook import ChatView, ThroughputView

    for build in (lambda: ThroughputView(url), lambda: ChatView().run(ChatSession(url), "hi")):
        try:
            view = build()
        except WorkbenchError as exc:
            assert exc.message
            continue
        if isinstance(view, ThroughputView):
            view.scrape()
            assert "error" in view.table.value.lower() or "cannot" in view.table.value.lower()
            view.stop()
        else:
            assert view.error is not None and view.error.message  # a TurnResult: the failure is its error


def test_a_notebook_cell_shows_the_cause_not_a_traceback():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    with capture_output() as captured:
        shell.run_cell(f"from workbench import MetricsPoller\nMetricsPoller('http://[::1')")
    shown = captured.stdout + captured.stderr
    assert "not a valid server URL" in shown and "http://127.0.0.1:8000" in shown
    assert "Traceback" not in shown and "File " not in shown
