"""What the benchmarks share: where things are, running the CLI, and interleaved rounds.

A benchmark runs as ``python benchmarks/NAME.py``, which puts this folder first on
``sys.path``, so it imports these as ``from common import ...``.

The host's speed drifts by up to 2x within minutes, so a benchmark compares its sides in
interleaved rounds (every side once per round, the rounds one after another) and reports
each side's best and median, and the ratios of those, rather than one pass of each.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLI = str(pathlib.Path(sys.executable).parent / "recsys-dist")
DEMO_CONFIG = str(ROOT / "configs" / "demo.yaml")

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


def hashed_features(features_file: str, out: pathlib.Path, shards: int) -> str:
    """A copy of the feature config with every dynamic table made hashed, with as many rows
    as the dynamic table holds on ``shards`` parameter servers (its ``capacity_per_shard``
    times ``shards``); the copy's path. For what only hashed tables run: the ``mirrored``
    strategies, and the hashed side of a comparison with dynamic tables."""
    doc = yaml.safe_load(pathlib.Path(features_file).read_text())
    for name, spec in doc["tables"].items():
        if spec.get("kind") == "dynamic":
            hashed = {"rows": spec["capacity_per_shard"] * shards}
            doc["tables"][name] = hashed | ({"dim": spec["dim"]} if "dim" in spec else {})
    out.mkdir(parents=True, exist_ok=True)
    path = out / "features_hashed.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def cli(*args: str) -> str:
    """Runs ``recsys-dist ARGS`` and returns its output; exits with the end of its output
    if it fails."""
    result = subprocess.run([CLI, *args], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"recsys-dist {args[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return result.stdout


def interleaved(
    sides: Mapping[K, Callable[[], T]],
    rounds: int,
    *,
    alternate: bool = False,
    show: Callable[[int, dict[K, T]], None] | None = None,
) -> dict[K, list[T]]:
    """Calls every side once per round, one after another, for ``rounds`` rounds, and
    returns each side's results in round order.

    ``alternate`` runs the sides in reverse order every other round, so that no side always
    goes first. ``show(round, done)`` is called after each call with the round (from 1)
    and that round's results so far, in the order they ran: the newest is the last.
    """
    results: dict[K, list[T]] = {name: [] for name in sides}
    for round_ in range(1, rounds + 1):
        order = list(sides) if not alternate or round_ % 2 else list(reversed(sides))
        done: dict[K, T] = {}
        for name in order:
            done[name] = sides[name]()
            results[name].append(done[name])
            if show is not None:
                show(round_, done)
    return results


def best_median(values: Iterable[float], best: Callable = max) -> tuple[float, float]:
    """The best (``max`` for rates, ``min`` for times) and the median of ``values``."""
    values = list(values)
    return best(values), statistics.median(values)


def ratios(
    ours: Iterable[float], base: Iterable[float], best: Callable = max
) -> tuple[float, float]:
    """``ours / base`` between the two sides' bests and between their medians."""
    (ours_best, ours_median), (base_best, base_median) = (
        best_median(ours, best),
        best_median(base, best),
    )
    return ours_best / base_best, ours_median / base_median


def start_moto():
    """Starts moto's S3 server on a free port of 127.0.0.1 and points the AWS variables of
    this process (and the processes it starts) at it; returns ``(server, port)``."""
    import logging
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
        }
    )
    return server, port
