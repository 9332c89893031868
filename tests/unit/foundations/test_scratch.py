"""The run-scoped temporary directory (``recsys_dist/scratch.py``), in subprocesses: each
test starts Python with a fresh ``TMPDIR``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.support.processes import subprocess_env

#: Prints the run-scoped directory, what tempfile and TMPDIR say, and a temporary file.
SHOW = """
import os, tempfile
from recsys_dist import scratch
path = scratch.start()
assert scratch.start() == path  # once per process
handle, name = tempfile.mkstemp()
print(path, tempfile.gettempdir(), os.environ["TMPDIR"], os.path.dirname(name), flush=True)
"""


def run(code: str, tmpdir, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(TMPDIR=str(tmpdir)),
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_directory_is_where_temporary_files_go_and_is_removed_at_exit(tmp_path):
    result = run(SHOW, tmp_path)
    assert result.returncode == 0, result.stderr
    path, *seen = result.stdout.split()
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith("recsys_dist-")
    assert seen == [path, path, path]
    assert os.listdir(tmp_path) == []


def test_a_command_removes_it_when_stopped_by_a_signal(tmp_path):
    code = (
        "import time\nfrom recsys_dist.console import run_command\n"
        "def main():\n    import tempfile\n    tempfile.mkstemp()\n"
        "    print(tempfile.gettempdir(), flush=True)\n    time.sleep(60)\n    return 0\n"
        "run_command(main)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(TMPDIR=str(tmp_path)),
    )
    path = process.stdout.readline().strip()
    assert os.listdir(path)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "error: stopped by SIGTERM" in stderr
    assert os.listdir(tmp_path) == []


def test_a_server_task_removes_it_when_stopped_by_sigterm(tmp_path):
    code = (
        "import tempfile, time\nfrom recsys_dist import scratch\n"
        "path = scratch.start()\nscratch.exit_on_signals()\nprint(path, flush=True)\n"
        "while True:\n    time.sleep(0.1)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(TMPDIR=str(tmp_path)),
    )
    assert os.path.isdir(process.stdout.readline().strip())
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert os.listdir(tmp_path) == []


def test_start_removes_a_dead_process_directory_and_keeps_a_live_one(tmp_path):
    dead = tmp_path / f"recsys_dist-{dead_pid()}-abcd_123"
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "__autograph_generated_file.py").write_text("")
    live = tmp_path / f"recsys_dist-{os.getpid()}-abcd_123"  # this test's process lives
    live.mkdir()
    others = [
        tmp_path / f"recsys_dist-{dead_pid()}-x",
        tmp_path / "recsys_dist_stage_1",
        tmp_path / "mine",
    ]  # not the package's run-scoped directories: never touched
    for other in others:
        other.mkdir()
    result = run(SHOW, tmp_path)
    assert result.returncode == 0, result.stderr
    assert not dead.exists()
    assert live.is_dir() and all(other.is_dir() for other in others)


REPLACED = """
import os, sys
from recsys_dist import scratch
path = scratch.start()
print(path, flush=True)
if sys.argv[1:] != ["again"]:  # replaced as a restart from a thread does: nothing removed
    os.execv(sys.executable, [sys.executable, __file__, "again"])
print(os.environ["TMPDIR"] == path, sorted(os.listdir(os.path.dirname(path))), flush=True)
"""


def test_a_process_replaced_by_exec_removes_the_directory_its_program_left(tmp_path):
    """The new program starts its directory beside the old one (``TMPDIR`` still names
    the old one) and removes the old one: its lock went with the program it replaced."""
    script, temp = tmp_path / "replaced.py", tmp_path / "tmp"
    script.write_text(REPLACED)
    temp.mkdir()
    result = subprocess.run(
        [sys.executable, str(script)],
        env=subprocess_env(TMPDIR=str(temp)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    old, new, listing = result.stdout.splitlines()
    assert os.path.dirname(old) == os.path.dirname(new) == str(temp)
    assert old != new
    assert listing == f"True {[os.path.basename(new)]}"


def test_a_directory_whose_lock_is_held_is_kept_even_if_its_pid_is_unknown(tmp_path):
    """A live process of another pid namespace sharing the temporary directory."""
    holder = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n"
    )
    other = tmp_path / f"recsys_dist-{dead_pid()}-abcd_123"
    other.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(other / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "locked"
        assert run(SHOW, tmp_path).returncode == 0
        assert other.is_dir()
    finally:
        process.kill()
        process.wait()
    assert run(SHOW, tmp_path).returncode == 0
    assert not other.exists()


def test_a_parent_removes_what_a_killed_child_left(tmp_path):
    """The child gets the parent's directory as TMPDIR, makes its own inside it, and is
    SIGKILLed; the parent removes the child's directory, then its own at exit."""
    code = (
        "import os, signal, subprocess, sys, time\nfrom recsys_dist import scratch\n"
        "mine = scratch.start()\n"
        "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]],"
        " stdout=subprocess.PIPE, text=True)\n"
        "theirs = child.stdout.readline().split()[0]\n"
        "assert os.path.dirname(theirs) == mine, (theirs, mine)\n"
        "child.kill(); child.wait()\nassert os.path.isdir(theirs)\n"
        "scratch.remove_left_by([child.pid])\n"
        "assert not os.path.exists(theirs) and os.path.isdir(mine)\nprint('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, SHOW + "import time\ntime.sleep(60)\n"],
        env=subprocess_env(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert os.listdir(tmp_path) == []


def test_a_lasting_directory_sits_outside_every_run_scoped_one(tmp_path):
    code = """
import os, tempfile
from recsys_dist import scratch
run = scratch.start()
tempfile.tempdir = tempfile.mkdtemp(prefix=scratch.PREFIX + "99999-", dir=run)  # a child's
print(run, scratch.lasting_directory("recsys_dist_logs_"))
"""
    result = run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir, logs = result.stdout.split()
    assert os.path.dirname(logs) == str(tmp_path)
    assert os.path.isdir(logs) and not os.path.exists(run_dir)  # the logs outlive the run


def test_a_command_keeps_its_lasting_directory_only_when_it_fails(tmp_path):
    code = """
import sys
from recsys_dist import scratch
from recsys_dist.console import run_command
def main():
    print(scratch.lasting_directory("recsys_dist_logs_"), flush=True)
    return int(sys.argv[1])
run_command(main)
"""
    for exit_code, kept in ((0, False), (3, True)):
        result = subprocess.run(
            [sys.executable, "-c", code, str(exit_code)],
            env=subprocess_env(TMPDIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == exit_code, result.stderr
        assert os.path.isdir(result.stdout.split()[-1]) == kept
