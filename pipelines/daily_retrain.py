"""Daily retraining: the same command as ``recsys-dist retrain``.

    python pipelines/daily_retrain.py --config configs/daily.yaml --date 2026-01-07

Train on the date's window (warm-started from the previous published model), evaluate
against that model on the held-out partition, publish only if the gate passes. The exit
codes are those of ``recsys-dist retrain`` (docs/retrain.md, "Exit codes"). See also
docs/scheduling.md.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from recsys_dist.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["retrain"]
    run()
