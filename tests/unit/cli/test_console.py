"""The console's output: one logging handler in today's line format, ``--quiet`` and
``--verbose`` on every command, and nothing printed by the library on its own when it is
embedded in another program (``recsys_dist/console.py``)."""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys

from recsys_dist.cli import build_parser
from recsys_dist.console import PACKAGE_LOGGER, LineFormatter, configure_output


def record(message: str, level: int = logging.INFO, *args) -> logging.LogRecord:
    return logging.LogRecord("recsys_dist.train.loop", level, __file__, 1, message, args, None)


def test_the_line_format_aligns_the_first_word_and_marks_warnings_and_errors():
    form = LineFormatter()
    assert form.format(record("resume\tfrom %s: step %s", logging.INFO, "/m/c", "7")) == (
        "resume   from /m/c: step 7"
    )
    assert form.format(record("checkpoint\tstep 7")) == "checkpoint step 7"  # longer word
    assert form.format(record("step 7 | 1 ex/s")) == "step 7 | 1 ex/s"  # no tab: as is
    assert form.format(record("table t is full", logging.WARNING)) == "warning  table t is full"
    assert form.format(record("lost", logging.ERROR)) == "error: lost"


def commands(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, command in action.choices.items():
                if any(
                    isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
                    for a in command._actions
                ):  # noqa: SLF001
                    yield from commands(command, (*prefix, name))
                else:
                    yield (*prefix, name), command


def test_every_command_takes_quiet_and_verbose_before_or_after_its_name():
    parser = build_parser()
    found = list(commands(parser))
    assert {" ".join(name) for name, _ in found} >= {
        "train",
        "evaluate",
        "data synth",
        "validate",
        "retrain",
        "export",
    }
    for name, command in found:
        options = command._option_string_actions  # noqa: SLF001
        assert {"-q", "--quiet", "-v", "--verbose"} <= set(options), name
    # the value given before the command's name survives the command's own parser
    required = ["--config", "c.yaml"]
    args = parser.parse_args(["-q", "validate", *required])
    assert args.quiet and not args.verbose
    args = parser.parse_args(["validate", *required, "--verbose"])
    assert args.verbose and not args.quiet
    args = parser.parse_args(["validate", *required])
    assert not args.quiet and not args.verbose


def test_quiet_keeps_warnings_and_verbose_adds_debug_lines(capsys):
    child = logging.getLogger("recsys_dist.train.loop")
    for quiet, verbose, shown in (
        (False, False, ["cluster  up", "warning  w"]),
        (True, False, ["warning  w"]),
        (False, True, ["detail", "cluster  up", "warning  w"]),
    ):
        configure_output(quiet=quiet, verbose=verbose)
        child.debug("detail")
        child.info("cluster\tup")
        child.warning("w")
        assert capsys.readouterr().out.splitlines() == shown, (quiet, verbose)
    installed = [
        h
        for h in logging.getLogger(PACKAGE_LOGGER).handlers
        if isinstance(h.formatter, LineFormatter)
    ]
    assert len(installed) == 1  # configuring again replaces the handler


def test_an_embedding_program_routes_the_library_lines_with_standard_logging():
    """No handler is installed by importing or running library code: a program's own
    ``logging`` configuration decides (here: the library's info lines silenced, its
    warnings kept, in the program's format)."""
    program = (
        "import logging\n"
        "logging.basicConfig(format='[%(name)s] %(levelname)s %(message)s', level=logging.INFO)\n"
        "logging.getLogger('recsys_dist').setLevel(logging.WARNING)\n"
        "from recsys_dist.train import run\n"
        "run.log_lines(['trained  5 steps', 'warning  dynamic table t is full'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "[recsys_dist.train.run] WARNING dynamic table t is full"
    )
    assert "trained" not in done.stderr


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on():
    """What a stuck command is doing: ``kill -USR1 <pid>`` (docs/cli.md)."""
    program = (
        "import threading, time\nfrom recsys_dist.console import run_command\n"
        "def main():\n    waiting = threading.Event()\n"
        "    threading.Thread(target=waiting.wait, name='helper', daemon=True).start()\n"
        "    print('ready', flush=True)\n    time.sleep(3)\n    print('done', flush=True)\n"
        "    return 0\n"
        "run_command(main)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGUSR1)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert stdout == "done\n"
    # the helper and the thread that ends the command on a signal (cluster/signals.py)
    assert stderr.count("Thread 0x") == 2 and "Current thread" in stderr, stderr
    assert "in _end_on_signals" in stderr, stderr
    assert "in main" in stderr and "in wait" in stderr, stderr
