"""Checkpoint cost: save and restore a rows x 16 table with its Adagrad slots, against dd.

It starts a local cluster (1 worker, 2 parameter servers), creates one embedding table
sharded over both servers plus its Adagrad accumulator (the optimizer state a
checkpoint must carry), and times, through the same code the trainer uses
(``checkpoint/store.py``):

- save: ``CheckpointManager.save`` (variables, state.json, then the _COMPLETE marker);
- restore: reading it back into the sharded variables;

against ``dd`` on the same disk, in the same run:

- ``dd if=/dev/zero of=F bs=16M count=N`` (buffered, like TensorFlow's writer) and with
  ``conv=fsync`` (durable);
- ``dd if=<checkpoint data file> of=/dev/null`` for the read side.

It prints seconds, MB/s and the ratios (checkpoint seconds / dd seconds; 1.0 means the
checkpoint runs at raw disk speed).

With ``--model-dir s3://bucket/prefix`` (or ``hdfs://``) the checkpoint goes there the way
training sends it: written to a local staging directory, uploaded, then ``state.json``
and ``_COMPLETE``; the restore downloads it first. The save line then splits into the
local write and the upload.

Usage: ``python benchmarks/checkpoint_bench.py [--rows 10000000] [--dir /tmp]
[--model-dir s3://bucket/prefix]``
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import tempfile
import time

import tensorflow as tf

import recsys_dist  # noqa: F401  (tf-keras, quiet logs)
from recsys_dist import storage_io
from recsys_dist.checkpoint.restore import create_slots, restore
from recsys_dist.checkpoint.store import CheckpointManager
from recsys_dist.cluster.placement import partitioned_tables
from recsys_dist.cluster.runtime import connect
from recsys_dist.config.sections import ClusterSpec


def dd(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(["dd", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument(
        "--dir",
        default=tempfile.gettempdir(),
        help="directory on the disk to measure (default: the temp dir)",
    )
    parser.add_argument(
        "--model-dir",
        help="where the checkpoint goes (default: under "
        "--dir); s3:// or hdfs:// to measure staging and upload",
    )
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ckpt_bench_", dir=args.dir)
    with connect(ClusterSpec("local", 1, 2), os.path.join(work, "logs"), 1 << 20) as runtime:
        with runtime.strategy.scope():
            with partitioned_tables():
                table = tf.Variable(
                    tf.random.uniform([args.rows, args.dim], -0.05, 0.05), name="table"
                )
            optimizer = tf.keras.optimizers.legacy.Adagrad(0.05)
            shards = table.variables
            create_slots(optimizer, list(shards))
        print(
            f"table {args.rows:,} x {args.dim} in {len(shards)} shards on "
            f"{sorted({s.device.split('/device')[0] for s in shards})}",
            flush=True,
        )
        checkpoint = tf.train.Checkpoint(table=table, optimizer=optimizer)
        manager = CheckpointManager(args.model_dir or os.path.join(work, "model"), keep=1)
        start = time.perf_counter()
        saved = manager.save(checkpoint, 1, {})
        save_seconds = time.perf_counter() - start
        start = time.perf_counter()
        restore(checkpoint, saved)
        restore_seconds = time.perf_counter() - start
        if args.model_dir:  # a local copy for dd to read, and the figures of the staging
            local = os.path.join(work, "copy")
            storage_io.download_dir(saved.directory, local)
            print(
                f"save: {saved.state['save_seconds']:.2f} s local write + "
                f"{saved.state.get('upload_seconds', 0):.2f} s upload, then the markers"
            )
            storage_io.rmtree(args.model_dir)
        else:
            local = saved.directory
        data_files = glob.glob(os.path.join(local, "variables.data-*"))
        nbytes = sum(os.path.getsize(f) for f in data_files)
    count = max(1, round(nbytes / (16 << 20)))
    dd_file = os.path.join(work, "dd.bin")
    dd_buffered = dd(["if=/dev/zero", f"of={dd_file}", "bs=16M", f"count={count}"])
    dd_fsync = dd(["if=/dev/zero", f"of={dd_file}", "bs=16M", f"count={count}", "conv=fsync"])
    dd_read = sum(dd([f"if={f}", "of=/dev/null", "bs=16M"]) for f in data_files)
    mb = nbytes / 1e6
    print(f"checkpoint data: {mb:,.0f} MB (table + Adagrad accumulator)")
    scheme = args.model_dir.split("://")[0] if args.model_dir else ""
    rows = [
        (f"save (CheckpointManager.save{' to ' + scheme if scheme else ''})", save_seconds),
        (f"restore (into the sharded table{' from ' + scheme if scheme else ''})", restore_seconds),
        ("dd write, buffered", dd_buffered),
        ("dd write, conv=fsync", dd_fsync),
        ("dd read of the checkpoint file", dd_read),
    ]
    for name, seconds in rows:
        print(f"{name:34s} {seconds:7.2f} s  {mb / seconds:8,.0f} MB/s")
    print(f"ratio save / dd buffered write:   {save_seconds / dd_buffered:.2f}")
    print(f"ratio save / dd fsync write:      {save_seconds / dd_fsync:.2f}")
    print(f"ratio restore / dd read:          {restore_seconds / dd_read:.2f}")
    subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    main()
    os._exit(0)
