"""Offline evaluation of the published daily models: the same command as
``recsys-dist offline-eval``.

Scores every published model of a retraining root (or the ones ``--models`` names) on
the partitions ``--dates`` covers, each with its own config and checkpoint, and writes
``OUT/<date>/`` (metrics.json, predictions.parquet, report.html per model) and one
comparison, ``OUT/comparison.json`` and ``OUT/comparison.html``. The oldest model is the
reference: the others get AUC deltas with a paired bootstrap interval against it.

Usage::

    python pipelines/offline_eval.py --root /srv/recsys/root \\
        --dates 2026-01-08..2026-01-14 --last 7 --out reports/offline/2026-01-14
    python pipelines/offline_eval.py --root ROOT --dates 2026-01-14 \\
        --models 2026-01-12,2026-01-13 --data s3://bucket/ctr --out OUT

The exit codes are those of ``recsys-dist offline-eval`` (docs/cli.md).

The arguments and the command are ``recsys_dist.cli``'s (``add_offline_eval_arguments``),
run by ``recsys_dist.console.run_command`` like every ``recsys-dist`` command; this script
only keeps its own program name and ``-v`` after the flags.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

try:
    import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import recsys_dist  # noqa: F401

from recsys_dist import cli  # noqa: E402
from recsys_dist.console import add_output_arguments, run_command  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of this script: ``recsys-dist offline-eval``'s, plus ``-q``
    and ``-v``."""
    parser = argparse.ArgumentParser(
        prog="offline_eval.py", description=cli.OFFLINE_EVAL_DESCRIPTION
    )
    cli.add_offline_eval_arguments(parser)
    add_output_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the offline evaluation; returns the exit code."""
    return cli.main(argv, build_parser())


def run() -> None:
    """Runs :func:`main` as ``recsys-dist offline-eval`` runs (signals, ``error:`` lines,
    exit through ``os._exit``: a ``ClusterCoordinator`` can hang in its destructor at exit
    once its servers are gone)."""
    run_command(main)


if __name__ == "__main__":
    run()
