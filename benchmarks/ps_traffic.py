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

Usage: ``python benchmarks/ps_traffic.py [--batches 50] [--examples-per-second 36000]``
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from recsys_dist.config import load_config  # noqa: E402
from recsys_dist.data.input_fn import prepare_input  # noqa: E402
from recsys_dist.data.synth import synthesize  # noqa: E402
from recsys_dist.models.embedding import FeatureEmbeddings, table_of  # noqa: E402
from recsys_dist.models.sharding import TablePartitioner, embedding_tables  # noqa: E402
from recsys_dist.models.zoo import build_from_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--examples-per-second", type=float, default=36_000,
                        help="measured training rate of the cluster (all workers)")
    args = parser.parse_args()
    config = load_config(ROOT / "configs" / "demo.yaml")
    batch_size = config.input.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        synthesize(tmp, days=1, rows_per_day=batch_size * args.batches * 2, seed=4)
        pipeline = prepare_input(config, None, 1, data_path=tmp)
        batches = list(pipeline.dataset_fn(training=True, worker_index=0)().take(args.batches))
    model = build_from_config(config)
    dense_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.dense_variables)
    rows_read = []
    row_bytes = []
    for batch in batches:
        rows = bytes_ = 0
        for name, value in batch["features"].items():
            feature = config.features.features[name]
            table = table_of(feature)
            if table is None:
                continue
            ids = value["ids"].numpy()[value["weights"].numpy() != 0] if isinstance(value, dict) \
                else value.numpy()
            distinct = len(np.unique(ids))
            rows += distinct
            bytes_ += distinct * config.features.tables[table].dim * 4
        rows_read.append(rows)
        row_bytes.append(bytes_)
    rows_mean, emb_read = float(np.mean(rows_read)), float(np.mean(row_bytes))
    emb_write = emb_read + rows_mean * 8
    per_step = 2 * dense_bytes + emb_read + emb_write
    steps_per_second = args.examples_per_second / batch_size
    print(f"model {config.model.name}, batch {batch_size}, {len(batches)} batches measured")
    print(f"dense weights read per step:        {dense_bytes / 1e6:8.2f} MB "
          f"({sum(int(np.prod(v.shape)) for v in model.dense_variables):,} parameters)")
    print(f"dense gradients written per step:   {dense_bytes / 1e6:8.2f} MB")
    id_features = sum(1 for f in config.features.features.values() if table_of(f) is not None)
    print(f"embedding rows read per step:       {emb_read / 1e6:8.2f} MB "
          f"({rows_mean:,.0f} distinct rows for {batch_size} examples x {id_features} id "
          "features)")
    print(f"embedding gradients written / step: {emb_write / 1e6:8.2f} MB (rows + int64 indices)")
    print(f"total per step:                     {per_step / 1e6:8.2f} MB")
    partitioner = TablePartitioner(config.train.embedding_shard_bytes, config.cluster.ps)
    stacks = [s for m in model.submodules if isinstance(m, FeatureEmbeddings) for s in m.stacks]
    with embedding_tables():
        shards = sum(partitioner(s.variable.shape, tf.float32)[0] for s in stacks)
    print(f"variables touched per step:         {len(config.features.tables)} tables stacked "
          f"into {len(stacks)} weight(s), {shards} shard(s) on {config.cluster.ps} ps "
          f"(gather + sparse update each), {len(model.dense_variables)} dense variables "
          "(read + update each)")
    print(f"at {args.examples_per_second:,.0f} examples/s ({steps_per_second:,.0f} steps/s over "
          f"all workers): {per_step * steps_per_second / 1e6:,.0f} MB/s through the parameter "
          "servers")


if __name__ == "__main__":
    main()
