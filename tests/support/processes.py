"""Environments for the Python subprocesses some tests start."""

from __future__ import annotations

import os

from tests.support.paths import REPO


def subprocess_env(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``, with the repository first on
    ``PYTHONPATH`` (so ``recsys_dist`` and ``tests.support`` import from this checkout)."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env
