"""Checks of ``cluster.strategy`` against the rest of a config, before anything starts.

``parameter_server`` (the default) takes any config. ``mirrored`` keeps a copy of every
table on each replica of one process (``cluster/mirrored.py``), so the global batch must
split evenly over the replicas, tables must be hashed, and the copies must fit in this
machine's memory (estimated from the config: rows x dim x 4 bytes per table, times one
plus the embedding optimizer's slots, times the replicas).
"""

from __future__ import annotations

import re
from typing import Any

from recsys_dist.config.features import FeatureConfig
from recsys_dist.config.yaml_loader import LocatedYaml

#: Optimizer slots per table element, by embedding optimizer.
TABLE_SLOTS = {"adagrad": 1, "ftrl": 2, "sgd": 0, "adam": 2}

#: Share of this machine's available memory the mirrored copies may take.
MEMORY_SHARE = 0.8


def check_strategy(doc: LocatedYaml, parsed: Any, features: FeatureConfig,
                   available_bytes: int | None = None) -> None:
    """Raises a ConfigError naming the key when ``cluster.strategy`` cannot run ``parsed``.

    Args:
      doc: The loaded config (for file and line numbers).
      parsed: The parsed config file (its ``cluster``, ``input`` and ``train`` sections;
        ``config/experiment.py`` calls this while parsing).
      features: Its feature config.
      available_bytes: Memory for the tables; default this machine's ``MemAvailable``.
    """
    cluster = parsed.cluster
    if cluster.strategy == "multi_worker_mirrored":
        raise doc.error("cluster.strategy", "multi_worker_mirrored is not built yet "
                        "(docs/training.md#strategies); use mirrored (synchronous, one "
                        "machine) or parameter_server")
    if cluster.strategy != "mirrored":
        return
    if cluster.mode == "tf_config":
        raise doc.error("cluster.mode", "tf_config is not supported with cluster.strategy: "
                        "mirrored, which runs in one process; use mode local or in_process "
                        "(or strategy parameter_server across machines)")
    batch = parsed.input.batch_size
    if batch % cluster.workers:
        raise doc.error("input.batch_size", f"{batch} is not divisible by cluster.workers="
                        f"{cluster.workers}, the replicas of cluster.strategy: mirrored (each "
                        f"replica takes batch_size / replicas rows); use a multiple of "
                        f"{cluster.workers}")
    dynamic = sorted(name for name, table in features.tables.items() if table.dynamic)
    if dynamic:
        raise doc.error("cluster.strategy", f"mirrored needs hashed tables, but table "
                        f"{dynamic[0]!r} of {features.file} is kind: dynamic (its rows live "
                        "on parameter servers); use cluster.strategy: parameter_server")
    slots = TABLE_SLOTS[parsed.train.embedding_optimizer.name]
    tables = sum(table.rows * table.dim * 4 for table in features.tables.values())
    need = tables * (1 + slots) * cluster.workers
    available = available_memory() if available_bytes is None else available_bytes
    if available is not None and need > MEMORY_SHARE * available:
        raise doc.error("cluster.strategy", f"mirrored keeps a copy of every table on each "
                        f"of its {cluster.workers} replicas: {_gib(tables)} of tables x "
                        f"(1 + {slots} optimizer slots) x {cluster.workers} = {_gib(need)}, "
                        f"more than {MEMORY_SHARE:.0%} of the {_gib(available)} this machine "
                        "has available; use cluster.strategy: parameter_server, which shards "
                        "the tables over parameter servers")


def available_memory() -> int | None:
    """This machine's ``MemAvailable`` in bytes, or None where /proc/meminfo has none."""
    try:
        with open("/proc/meminfo") as f:
            match = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.M)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"
