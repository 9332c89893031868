"""Progress lines for long jobs: rewritten in place on a terminal, throttled otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """Prints ``label: done/total (rate/s, ETA)`` to stderr at most every ``every`` seconds.

    Args:
      label: What is being counted, e.g. ``"rows"``.
      every: Minimum seconds between lines when stderr is not a terminal.
    """

    def __init__(self, label: str, every: float = 5.0):
        self.label = label
        self.every = every
        self.start = time.perf_counter()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        finished = done >= total
        if not finished and now - self._last < (0.2 if self._tty else self.every):
            return
        self._last = now
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else float("inf")
        line = (
            f"{self.label}: {done:,}/{total:,} ({100 * done / max(total, 1):.0f}%) "
            f"{rate:,.0f}/s, elapsed {elapsed:.0f}s, ETA {eta:.0f}s"
        )
        if self._tty:
            sys.stderr.write("\r" + line + ("\n" if finished else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
