"""Offline evaluation of the published daily models on the same held-out days.

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

Exit codes: 0 done; 2 bad arguments, config or publication (e.g. a date not
published); 3 data error (e.g. a missing partition); 4 cluster lost.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

try:
    import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import recsys_dist  # noqa: F401

from recsys_dist.cli import exit_now, reporting_errors  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of this script."""
    parser = argparse.ArgumentParser(
        prog="offline_eval.py",
        description="Score published models on the same days and compare them: per-model "
                    "reports plus comparison.json and a self-contained comparison.html.")
    parser.add_argument("--root", required=True,
                        help="retraining root holding published/<date>/ (local or s3://)")
    parser.add_argument("--dates", required=True,
                        help="evaluation partitions, FROM..TO or one date (YYYY-MM-DD)")
    parser.add_argument("--models", help="comma-separated dates of the published models to "
                                         "evaluate (default: every published model)")
    parser.add_argument("--last", type=int, metavar="N",
                        help="only the N newest of those models (e.g. 7 for the last week's)")
    parser.add_argument("--data", help="data root overriding each model's data.path")
    parser.add_argument("--out", required=True, help="output directory (local or s3://)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="keep TensorFlow's own Python log messages")
    return parser


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def print_table(comparison: dict) -> None:
    """Prints one line per model and label: AUC, delta vs the reference and its interval."""
    print(f"{'model':<12} {'step':>8} {'label':<12} {'AUC':>7} {'Δ AUC':>9} "
          f"{'interval':>21} {'logloss':>8}")
    for model in comparison["models"]:
        name = model["date"] + ("*" if model.get("current") else "")
        for label, entry in model["labels"].items():
            boot = entry.get("bootstrap") or {}
            delta = (entry.get("delta") or {}).get("auc")
            interval = (f"[{_fmt(boot.get('low'), '+.4f')}, {_fmt(boot.get('high'), '+.4f')}]"
                        if boot else "")
            shown = ("reference" if model["date"] == comparison["reference"]
                     else _fmt(delta, "+.4f"))
            print(f"{name:<12} {_fmt(model.get('step'), ',d'):>8} {label:<12} "
                  f"{_fmt(entry.get('auc'), '.4f'):>7} {shown:>9} {interval:>21} "
                  f"{_fmt(entry.get('logloss'), '.4f'):>8}")
    if comparison.get("current"):
        print(f"(* = current: {comparison['current']})")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the offline evaluation; returns the exit code."""
    args = build_parser().parse_args(argv)
    if not args.verbose:
        logging.getLogger("tensorflow").setLevel(logging.CRITICAL)
    from recsys_dist.retrain.offline_eval import evaluate_published

    models = [m for m in args.models.split(",") if m.strip()] if args.models else None

    def evaluate() -> int:
        comparison = evaluate_published(
            args.root, args.dates, args.out, models=models, data_path=args.data, last=args.last,
            log=lambda line: print(line, file=sys.stderr, flush=True))
        print_table(comparison)
        print(f"report   {comparison['html']}")
        return 0

    return reporting_errors(evaluate)


def run() -> None:
    """Runs :func:`main` and exits through ``os._exit`` after flushing, as the
    ``recsys-dist`` command does (see :func:`recsys_dist.cli.run`): a ``ClusterCoordinator``
    can hang in its destructor at exit once its servers are gone."""
    from recsys_dist.tf_log_filter import filter_stderr_for_life

    filter_stderr_for_life()
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    exit_now(code)


if __name__ == "__main__":
    run()
