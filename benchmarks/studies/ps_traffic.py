"""What one training step reads from the parameter servers and writes back.

For the demo model on real batches of the synthetic data, it counts per worker step:

- dense weights read (every dense variable, each step) and their gradients written;
- embedding rows read: the distinct ids each feature looks up (the embedding layer
  de-duplicates ids before the lookup), times the table's dim;
- embedding gradients written: the same rows, plus their int64 indices;
- how many variables (table shards and dense variables) one step reads and updates on the
  parameter servers: each is at least one remote operation per step, whatever its size.

It prints the bytes per step and, given the measured step rate of ``recsys-dist train``
(``--examples-per-second``, e.g. from ``benchmarks/train_bench.py`` way a), the traffic per
second the cluster moves.

Answered: docs/training.md ("Parameter-server traffic"): 3.20 MB per worker step for the
demo model, most of it the dense weights read and their gradients written (which
``train.dense_refresh_steps`` then targeted). ``ps_traffic(...)`` returns the figures as a
:class:`Traffic`.

Usage: ``python benchmarks/studies/ps_traffic.py [--batches 50] [--examples-per-second
36000]``
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import tempfile

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.cluster.placement import TablePartitioner, partitioned_tables  # noqa: E402
from recsys_dist.config import load_config  # noqa: E402
from recsys_dist.data.input_fn import prepare_input  # noqa: E402
from recsys_dist.data.synth_files import synthesize  # noqa: E402
from recsys_dist.models.embedding import FeatureEmbeddings  # noqa: E402
from recsys_dist.models.zoo import build_from_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one worker step of the demo model moves, averaged over ``batches`` batches."""

    model: str
    batch_size: int
    batches: int
    dense_parameters: int
    dense_variables: int
    dense_bytes: float  # read per step, and as much again written as gradients
    distinct_rows: float  # embedding rows looked up per step, over all features
    id_features: int
    embedding_read_bytes: float
    embedding_write_bytes: float  # the rows' gradients plus their int64 indices
    tables: int
    stacked_weights: int
    shards: int
    ps: int

    @property
    def bytes_per_step(self) -> float:
        return 2 * self.dense_bytes + self.embedding_read_bytes + self.embedding_write_bytes


def ps_traffic(batches: int = 50) -> Traffic:
    """Counts what the demo model (``configs/demo.yaml``) reads from and writes to the
    parameter servers per step, on ``batches`` real batches of synthetic data."""
    config = load_config(ROOT / "configs" / "demo.yaml")
    batch_size = config.input.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        synthesize(tmp, days=1, rows_per_day=batch_size * batches * 2, seed=4)
        pipeline = prepare_input(config.with_data_path(tmp), None, 1)
        measured = list(pipeline.local_dataset(training=True).take(batches))
    model = build_from_config(config)
    rows_read, row_bytes = [], []
    for batch in measured:
        rows = bytes_ = 0
        for name, value in batch["features"].items():
            table = config.features.features[name].table_name
            if table is None:
                continue
            ids = (
                value["ids"].numpy()[value["weights"].numpy() != 0]
                if isinstance(value, dict)
                else value.numpy()
            )
            distinct = len(np.unique(ids))
            rows += distinct
            bytes_ += distinct * config.features.tables[table].dim * 4
        rows_read.append(rows)
        row_bytes.append(bytes_)
    rows_mean, emb_read = float(np.mean(rows_read)), float(np.mean(row_bytes))
    partitioner = TablePartitioner(config.train.embedding_shard_bytes, config.cluster.ps)
    stacks = [s for m in model.submodules if isinstance(m, FeatureEmbeddings) for s in m.stacks]
    with partitioned_tables():
        shards = sum(partitioner(s.variable.shape, tf.float32)[0] for s in stacks)
    dense_parameters = sum(int(np.prod(v.shape)) for v in model.dense_variables)
    return Traffic(
        model=config.model.name,
        batch_size=batch_size,
        batches=len(measured),
        dense_parameters=dense_parameters,
        dense_variables=len(model.dense_variables),
        dense_bytes=4.0 * dense_parameters,
        distinct_rows=rows_mean,
        id_features=sum(1 for f in config.features.features.values() if f.id_valued),
        embedding_read_bytes=emb_read,
        embedding_write_bytes=emb_read + rows_mean * 8,
        tables=len(config.features.tables),
        stacked_weights=len(stacks),
        shards=int(shards),
        ps=config.cluster.ps,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument(
        "--examples-per-second",
        type=float,
        default=36_000,
        help="measured training rate of the cluster (all workers)",
    )
    args = parser.parse_args()
    t = ps_traffic(args.batches)
    steps_per_second = args.examples_per_second / t.batch_size
    print(f"model {t.model}, batch {t.batch_size}, {t.batches} batches measured")
    print(
        f"dense weights read per step:        {t.dense_bytes / 1e6:8.2f} MB "
        f"({t.dense_parameters:,} parameters)"
    )
    print(f"dense gradients written per step:   {t.dense_bytes / 1e6:8.2f} MB")
    print(
        f"embedding rows read per step:       {t.embedding_read_bytes / 1e6:8.2f} MB "
        f"({t.distinct_rows:,.0f} distinct rows for {t.batch_size} examples x "
        f"{t.id_features} id features)"
    )
    print(
        f"embedding gradients written / step: {t.embedding_write_bytes / 1e6:8.2f} MB "
        "(rows + int64 indices)"
    )
    print(f"total per step:                     {t.bytes_per_step / 1e6:8.2f} MB")
    print(
        f"variables touched per step:         {t.tables} tables stacked into "
        f"{t.stacked_weights} weight(s), {t.shards} shard(s) on {t.ps} ps (gather + sparse "
        f"update each), {t.dense_variables} dense variables (read + update each)"
    )
    print(
        f"at {args.examples_per_second:,.0f} examples/s ({steps_per_second:,.0f} steps/s "
        f"over all workers): {t.bytes_per_step * steps_per_second / 1e6:,.0f} MB/s through "
        "the parameter servers"
    )


if __name__ == "__main__":
    main()
