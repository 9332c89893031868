"""Checks of ``cluster.strategy`` against the rest of a config, before anything starts.

``parameter_server`` (the default) takes any config. ``mirrored`` keeps a copy of every
table on each replica of one process (``cluster/mirrored.py``), and
``multi_worker_mirrored`` one on each worker process (``cluster/collective.py``), so the
global batch must split evenly over the replicas, tables must be hashed, and the copies
must fit in memory (estimated from the config: each table with the embedding optimizer's
slots, :func:`~recsys_dist.config.memory.table_bytes`, times the copies on this machine).
"""

from __future__ import annotations

import re
from typing import Any

from recsys_dist.config.memory import TABLE_SLOTS, table_bytes
from recsys_dist.features.config import FeatureConfig
from recsys_dist.yaml_loader import LocatedYaml

#: Share of this machine's available memory the mirrored copies may take.
MEMORY_SHARE = 0.8


def check_strategy(
    doc: LocatedYaml, parsed: Any, features: FeatureConfig, available_bytes: int | None = None
) -> None:
    """Raises a ConfigError naming the key when ``cluster.strategy`` cannot run ``parsed``.

    Args:
      doc: The loaded config (for file and line numbers).
      parsed: The parsed config file (its ``cluster``, ``input`` and ``train`` sections;
        ``config/experiment.py`` calls this while parsing).
      features: Its feature config.
      available_bytes: Memory for the tables; default this machine's ``MemAvailable``.
    """
    cluster = parsed.cluster
    if cluster.strategy == "parameter_server":
        return
    name = cluster.strategy
    if name == "mirrored" and cluster.mode == "tf_config":
        raise doc.error(
            "cluster.mode",
            "tf_config is not supported with cluster.strategy: "
            "mirrored, which runs in one process; use mode local or in_process "
            "(or strategy multi_worker_mirrored or parameter_server across machines)",
        )
    if name == "multi_worker_mirrored" and cluster.mode == "in_process":
        raise doc.error(
            "cluster.mode",
            "in_process is not supported with cluster.strategy: "
            "multi_worker_mirrored, whose workers are processes; use mode local "
            "(worker processes on this machine) or tf_config",
        )
    replicas = "the replicas" if name == "mirrored" else "the worker processes"
    batch = parsed.input.batch_size
    if batch % cluster.workers:
        raise doc.error(
            "input.batch_size",
            f"{batch} is not divisible by cluster.workers="
            f"{cluster.workers}, {replicas} of cluster.strategy: {name} (each "
            f"takes batch_size / {cluster.workers} rows of a step); use a multiple "
            f"of {cluster.workers}",
        )
    dynamic = sorted(n for n, table in features.tables.items() if table.dynamic)
    if dynamic:
        raise doc.error(
            "cluster.strategy",
            f"{name} needs hashed tables, but table "
            f"{dynamic[0]!r} of {features.file} is kind: dynamic (its rows live "
            "on parameter servers); use cluster.strategy: parameter_server",
        )
    if name == "multi_worker_mirrored":
        _check_multi_worker(doc, parsed.train)
    optimizer = parsed.train.embedding_optimizer.name
    slots = TABLE_SLOTS[optimizer]
    tables = sum(table_bytes(t.rows, t.dim) for t in features.tables.values())
    copy = sum(table_bytes(t.rows, t.dim, optimizer) for t in features.tables.values())
    # mirrored: every replica's copy is on this machine. multi_worker_mirrored: one copy
    # per worker process, all on this machine in local mode, one per machine otherwise.
    copies = cluster.workers if (name == "mirrored" or cluster.mode == "local") else 1
    need = copy * copies
    available = available_memory() if available_bytes is None else available_bytes
    if available is not None and need > MEMORY_SHARE * available:
        holders = (
            f"each of its {copies} replicas"
            if name == "mirrored"
            else f"each of its {copies} worker processes on this machine"
            if copies > 1
            else "each worker's machine"
        )
        raise doc.error(
            "cluster.strategy",
            f"{name} keeps a copy of every table on "
            f"{holders}: {_gib(tables)} of tables x (1 + {slots} optimizer slots) "
            f"x {copies} = {_gib(need)}, more than {MEMORY_SHARE:.0%} of the "
            f"{_gib(available)} this machine has available; use "
            "cluster.strategy: parameter_server, which shards the tables over "
            "parameter servers",
        )


def _check_multi_worker(doc: LocatedYaml, train: Any) -> None:
    """What ``multi_worker_mirrored`` does not run: the dense-weight cache."""
    if train.dense_refresh_steps is not None:
        raise doc.error(
            "train.dense_refresh_steps",
            "has no effect under cluster.strategy: "
            "multi_worker_mirrored (every worker holds its own copy of the dense "
            "weights); remove it",
        )


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
