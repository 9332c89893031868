"""Progress lines of long jobs (``recsys_dist/progress.py``): one line per call at most every
``every`` seconds when stderr is a file, rewritten in place on a terminal, and always the
last one."""

from __future__ import annotations

import io
import re
import sys

from recsys_dist.progress import Progress

LINE = r"rows: {done}/{total} \({pct}%\) [\d,]+/s, elapsed \d+s, ETA (\d+|inf)s"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_to_a_file_name_count_share_rate_and_eta(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    progress = Progress("rows", every=0.0)
    progress(2_500, 10_000)
    progress(10_000, 10_000)
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(LINE.format(done="2,500", total="10,000", pct="25"), lines[0])
    assert re.fullmatch(LINE.format(done="10,000", total="10,000", pct="100"), lines[1])
    assert lines[1].endswith("ETA 0s")


def test_lines_are_throttled_but_the_last_is_always_written(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    progress = Progress("rows", every=1e9)
    for done in range(0, 100, 10):
        progress(done, 100)
    assert err.getvalue() == ""
    progress(100, 100)
    assert re.fullmatch(LINE.format(done="100", total="100", pct="100") + "\n", err.getvalue())


def test_a_terminal_gets_one_line_rewritten_in_place(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    progress = Progress("rows")
    progress(0, 4)
    progress(4, 4)
    text = err.getvalue()
    assert text.startswith("\rrows: 0/4 (0%) 0/s") and text.count("\r") == 2
    assert text.endswith("\n") and text.count("\n") == 1
    assert "rows: 4/4 (100%)" in text
