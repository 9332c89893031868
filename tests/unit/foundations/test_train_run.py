"""The test helper that runs ``recsys-dist train``: its steps-per-second arithmetic and the
failure of a run that does not end."""

from __future__ import annotations

import sys

import pytest

from tests.support.train_run import TrainRun


def _run_with(lines: list[tuple[float, str]]) -> TrainRun:
    run = TrainRun.__new__(TrainRun)  # the output only, no process
    run.times = [t for t, _ in lines]
    run.lines = [line for _, line in lines]
    return run


def test_steps_per_second_divides_by_the_window_or_until_the_data_ran_out():
    run = _run_with([(9.0, "step 100 | x\n"), (10.003, "step 106 | x\n"), (40.0, "step 200 | x\n")])
    # one line 3 ms after the window's start, then nothing for 30 s: 6 steps in 15 s
    assert run.steps_per_second(10.0, 25.0) == pytest.approx(6 / 15)
    # the data ran out 30 s in: the window ends at the last progress line
    assert run.steps_per_second(10.0, 60.0) == pytest.approx(100 / 30)
    assert run.steps_per_second(40.0, 50.0) == 0.0  # nothing after the start


def test_a_run_that_does_not_end_fails_with_its_output_and_its_threads_stacks():
    """The command prints its stacks on SIGUSR1 (``recsys_dist/console.py``); so does this
    stand-in."""
    stand_in = (
        "import faulthandler, signal, sys, time\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True, file=sys.stdout)\n"
        "print('started', flush=True)\ntime.sleep(30)\n"
    )
    run = TrainRun("unused.yaml", "unused", prefix=(sys.executable, "-c", stand_in, "--"))
    run.wait_for("started")  # its handler is in place
    with pytest.raises(
        AssertionError,
        match=r"(?s)did not end within 1 s; its output ends:\nstarted\n\n"
        r"its threads' stacks when the test gave up:\nCurrent thread .*in <module>",
    ):
        run.finish(timeout=1)
    assert run.process.poll() is not None  # killed
