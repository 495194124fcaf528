"""The tabs' long work (benchmarks, experiments) runs off the event thread: progress
arrives in order, then the result, or the cause in one line (no traceback)."""

from workbench.errors import LaunchError
from workbench.ui.background import BackgroundWork


def test_progress_then_result():
    def work(report):
        for step in range(3):
            report(f"step {step}")
        return {"tok/s": 12.5}

    background = BackgroundWork(work)
    assert list(background) == ["step 0", "step 1", "step 2"]
    assert background.result == {"tok/s": 12.5} and background.error is None


def test_a_workbench_error_becomes_its_message_and_hint():
    def work(report):
        report("launching")
        raise LaunchError("port 8000 is taken", hint="Pick another port.")

    background = BackgroundWork(work)
    assert list(background) == ["launching"]
    assert background.error == "port 8000 is taken Pick another port." and background.result is None


def test_an_unexpected_error_is_named_not_raised():
    background = BackgroundWork(lambda report: 1 / 0)
    assert list(background) == []
    assert background.error == "ZeroDivisionError: division by zero"
