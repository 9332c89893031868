"""A peer DIN on the Amazon sequence rows: DeepCTR's ``DIN`` (tf.keras) with its defaults.

Trains DeepCTR's DIN (``deepctr.models.DIN``, pip package ``deepctr``, run here on tf-keras
2.19 with ``TF_USE_LEGACY_KERAS=1``, which this script sets before TensorFlow is imported)
on the ``train`` split written by ``benchmarks/amazon_sequences.py``, once per seed, and
scores ``validation`` and ``test`` with ``sklearn.metrics.roc_auc_score``.

Features (all ids as they are in the data: items 1 .. 23,715, users 1 .. 31,013; 0 is
DeepCTR's padding/mask id):

- ``user_id``: ``SparseFeat``, its own table;
- ``item_id`` (the candidate): ``SparseFeat``, and the DIN query;
- ``hist_item_id``: ``VarLenSparseFeat(SparseFeat('hist_item_id', embedding_name='item_id'),
  maxlen=--max-history, length_name='hist_length')``: it shares the ``item_id`` table
  (DeepCTR builds one ``Embedding`` per ``embedding_name``, with ``mask_zero=True``), padded
  with 0 after the items (post-padding, the items' order kept, newest last; DIN's attention
  has no positions, and padded slots are masked). A history longer than ``--max-history``
  keeps its newest items.

All three tables have ``--embedding-dim`` columns (16). The rest is DeepCTR 0.9.4's
``DIN(...)`` defaults, unchanged:

- attention unit (``LocalActivationUnit`` inside ``AttentionSequencePoolingLayer``): input
  ``[q, k, q - k, q * k]``, hidden units (80, 40), activation ``dice`` (Dice, with its
  batch-norm-like statistics), then a linear score; ``att_weight_normalization=False``
  (no softmax: padded slots get weight 0, the others their raw score), no dropout, no BN;
- DNN on ``[user emb, item emb, attention-pooled history]``: hidden units (256, 128, 64),
  activation ``relu``, no BN, dropout 0, ``l2_reg_dnn`` 0; then ``Dense(1, use_bias=False)``
  and DeepCTR's ``PredictionLayer`` (a bias, sigmoid);
- embeddings: ``RandomNormal(0, 1e-4)`` initializer, ``l2_reg_embedding`` 1e-6 (on the
  whole table, every step);
- optimizer: Adam, learning rate 1e-3 (DeepCTR's DIN example compiles with ``'adam'``:
  tf-keras' Adam defaults, beta 0.9 / 0.999, epsilon 1e-7); loss binary cross-entropy.

Seeds: ``--seeds 0,1,2`` sets, per run, ``tf.keras.utils.set_random_seed(S)``, DIN's
``seed=S`` (DNN initializers) and the embedding initializers' seed (DeepCTR's default is a
fixed 2020); ``fit`` shuffles the training rows every epoch (``shuffle=True``). The
attention unit's initializer seed is fixed inside DeepCTR (1024).

Printed: one line per seed, ``seed=S test_auc=0.xxxx val_auc=0.xxxx train_seconds=T
epoch_seconds=E1,E2,...`` (with more than one epoch, first one line per epoch with its
validation and test AUC), then the mean and standard error (standard deviation over the
seeds / sqrt(number of seeds)) of test and validation AUC and of the seconds per epoch.
``--out-json FILE`` writes the same figures.

Usage::

    python benchmarks/peer_din.py --data /tmp/amazon_seq [--seeds 0,1,2] [--epochs 1]
        [--batch-size 1024] [--embedding-dim 16] [--max-history 50] [--out-json FILE]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: deepctr, scikit-learn).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # DeepCTR is tf.keras (Keras 2) code
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402

SPLITS = ("train", "validation", "test")
DIN_DEFAULTS = {
    "att_hidden_size": [80, 40],
    "att_activation": "dice",
    "att_weight_normalization": False,
    "dnn_hidden_units": [256, 128, 64],
    "dnn_activation": "relu",
    "dnn_use_bn": False,
    "dnn_dropout": 0,
    "l2_reg_dnn": 0,
    "l2_reg_embedding": 1e-6,
    "optimizer": "adam (tf-keras defaults: learning rate 1e-3)",
    "loss": "binary_crossentropy",
}


def load_split(directory: pathlib.Path, max_history: int) -> dict[str, np.ndarray]:
    """One split as the model's inputs: ids int32, the history post-padded to
    ``max_history`` with 0 (newest items kept), and ``click``."""
    table = ds.dataset(directory, format="parquet").to_table()
    hist = table.column("hist_item_id").combine_chunks()
    offsets = hist.offsets.to_numpy().astype(np.int64)
    values = hist.values.to_numpy().astype(np.int32)
    lengths = np.diff(offsets)
    keep = np.minimum(lengths, max_history)
    first = offsets[1:] - keep  # newest `keep` items of each row
    rows = np.repeat(np.arange(len(keep)), keep)
    col = np.arange(keep.sum()) - np.repeat(np.cumsum(keep) - keep, keep)
    padded = np.zeros((len(keep), max_history), np.int32)
    padded[rows, col] = values[np.repeat(first, keep) + col]
    if values.size and values.min() <= 0:
        raise SystemExit(f"{directory}: item ids must be >= 1 (0 is DeepCTR's padding)")
    return {
        "user_id": table.column("user_id").to_numpy().astype(np.int32),
        "item_id": table.column("item_id").to_numpy().astype(np.int32),
        "hist_item_id": padded,
        "hist_length": keep.astype(np.int32),
        "click": table.column("click").to_numpy().astype(np.float32),
    }


def build_model(n_users: int, n_items: int, embedding_dim: int, max_history: int, seed: int):
    import tensorflow as tf
    from deepctr.feature_column import SparseFeat, VarLenSparseFeat
    from deepctr.models import DIN

    init = tf.keras.initializers.RandomNormal(mean=0.0, stddev=1e-4, seed=seed)
    columns = [
        SparseFeat("user_id", n_users, embedding_dim=embedding_dim, embeddings_initializer=init),
        SparseFeat("item_id", n_items, embedding_dim=embedding_dim, embeddings_initializer=init),
        VarLenSparseFeat(
            SparseFeat(
                "hist_item_id",
                n_items,
                embedding_dim=embedding_dim,
                embedding_name="item_id",
                embeddings_initializer=init,
            ),
            maxlen=max_history,
            length_name="hist_length",
        ),
    ]
    model = DIN(columns, ["item_id"], seed=seed)
    model.compile(tf.keras.optimizers.Adam(learning_rate=1e-3), "binary_crossentropy")
    return model


def auc(model, data: dict[str, np.ndarray], batch_size: int) -> float:
    from sklearn.metrics import roc_auc_score

    x = {k: v for k, v in data.items() if k != "click"}
    pred = model.predict(x, batch_size=max(batch_size, 8192), verbose=0).reshape(-1)
    return float(roc_auc_score(data["click"], pred))


def run_seed(seed: int, splits: dict, sizes: tuple[int, int], args) -> dict:
    import tensorflow as tf

    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)
    model = build_model(*sizes, args.embedding_dim, args.max_history, seed)
    train = splits["train"]
    x = {k: v for k, v in train.items() if k != "click"}
    per_epoch, epoch_seconds = [], []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        model.fit(x, train["click"], batch_size=args.batch_size, epochs=1, shuffle=True, verbose=0)
        epoch_seconds.append(time.perf_counter() - start)
        if args.epochs > 1 or epoch == args.epochs:
            row = {
                "epoch": epoch,
                "val_auc": auc(model, splits["validation"], args.batch_size),
                "test_auc": auc(model, splits["test"], args.batch_size),
            }
            per_epoch.append(row)
            if args.epochs > 1:
                print(
                    f"  seed={seed} epoch={epoch} val_auc={row['val_auc']:.4f} "
                    f"test_auc={row['test_auc']:.4f} epoch_seconds={epoch_seconds[-1]:.1f}",
                    flush=True,
                )
    result = {
        "seed": seed,
        "test_auc": per_epoch[-1]["test_auc"],
        "val_auc": per_epoch[-1]["val_auc"],
        "train_seconds": sum(epoch_seconds),
        "epoch_seconds": epoch_seconds,
        "per_epoch": per_epoch,
    }
    print(
        f"seed={seed} test_auc={result['test_auc']:.4f} val_auc={result['val_auc']:.4f} "
        f"train_seconds={result['train_seconds']:.1f} epoch_seconds="
        + ",".join(f"{s:.1f}" for s in epoch_seconds),
        flush=True,
    )
    return result


def mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="output of amazon_sequences.py")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--max-history", type=int, default=50)
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    data = pathlib.Path(args.data)
    missing = [s for s in SPLITS if not (data / s).is_dir()]
    if missing:
        parser.error(f"--data {data} has no {', '.join(missing)} (run amazon_sequences.py)")
    try:
        import deepctr
        import sklearn  # noqa: F401
    except ImportError as err:
        sys.exit(
            f"peer_din.py needs deepctr and scikit-learn ({err}): "
            f"{sys.executable} -m pip install -e '.[bench]'"
        )
    import tensorflow as tf
    import tf_keras

    start = time.perf_counter()
    splits = {s: load_split(data / s, args.max_history) for s in SPLITS}
    n_users = int(max(d["user_id"].max() for d in splits.values())) + 1
    n_items = (
        int(max(max(d["item_id"].max(), d["hist_item_id"].max()) for d in splits.values())) + 1
    )
    print(
        f"deepctr {deepctr.__version__} DIN on tensorflow {tf.__version__} "
        f"(tf-keras {tf_keras.__version__}); "
        f"rows train {len(splits['train']['click']):,}, validation "
        f"{len(splits['validation']['click']):,}, test {len(splits['test']['click']):,}; "
        f"tables user {n_users:,}, item {n_items:,} x {args.embedding_dim}; "
        f"epochs {args.epochs}, batch {args.batch_size}, max history {args.max_history}; "
        f"read in {time.perf_counter() - start:.1f} s",
        flush=True,
    )

    results = [run_seed(seed, splits, (n_users, n_items), args) for seed in seeds]
    summary = {}
    for key in ("test_auc", "val_auc"):
        summary[key] = mean_se([r[key] for r in results])
    summary["epoch_seconds"] = mean_se([s for r in results for s in r["epoch_seconds"]])
    print(
        f"mean test_auc={summary['test_auc'][0]:.4f} (se {summary['test_auc'][1]:.4f}) "
        f"val_auc={summary['val_auc'][0]:.4f} (se {summary['val_auc'][1]:.4f}) "
        f"epoch_seconds={summary['epoch_seconds'][0]:.1f} "
        f"(se {summary['epoch_seconds'][1]:.1f}) over seeds {args.seeds}"
    )
    if args.out_json:
        pathlib.Path(args.out_json).write_text(
            json.dumps(
                {
                    "peer": f"deepctr {deepctr.__version__} DIN",
                    "tensorflow": tf.__version__,
                    "tf_keras": tf_keras.__version__,
                    "data": str(data.resolve()),
                    "args": vars(args),
                    "din": DIN_DEFAULTS,
                    "seeds": results,
                    "mean_se": {k: {"mean": m, "se": se} for k, (m, se) in summary.items()},
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
