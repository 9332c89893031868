"""Model quality against peers: our zoo next to scikit-learn, LightGBM and tf-keras in one process.

One run trains every method on the same training window of a ``dt=YYYY-MM-DD`` Parquet
dataset and scores the same held-out window, and prints one table: per method, AUC and
logloss on the held-out window, AUC on the training window (a training AUC far above the
held-out one shows over-fitting, two low ones under-fitting) and wall time.

The methods:

- **logreg C=...**: scikit-learn ``LogisticRegression`` (L2, ``liblinear`` by default) on a
  one-hot encoding of exactly the ids our feature transforms produce: the rows are read
  with pyarrow and turned into the model's integer ids by
  :class:`recsys_dist.features.transforms.FeatureTransform` (same hashing, bucketizing,
  crosses and null policy as training), one sparse column per (table, row); features that
  share a table share its columns, a multi-valued feature puts its pooling weights (its
  combiner's) on its ids' columns. The dense numeric inputs our ``lr`` reads (``log1p``
  values and missing indicators) are extra columns as they are. So it sees what our
  ``lr`` sees. One fit per C of ``--c-grid`` (default 0.01, 0.1, 1.0), run to
  convergence (``--logreg-max-iter``); a fit that stops at the limit says so. The best C
  (held-out AUC) is marked and is the ``logreg`` of the last line.
- **lightgbm**: LightGBM on the raw columns the feature config reads (not the transforms):
  categorical features' columns (string or integer ids) as pandas category codes learned
  on the training window (an unseen or null id is missing), numeric columns as they are
  (nulls as NaN), declared categorical/numeric accordingly. Multi-valued columns (lists,
  delimited strings) and crosses are left out: LightGBM has no multi-valued feature, and
  trees find interactions themselves. Setting (:data:`LIGHTGBM_PARAMS`): 300 trees, 31
  leaves, learning rate 0.05, LightGBM's defaults otherwise (min 20 rows per leaf, 255
  bins, categorical splits with ``max_cat_threshold`` 32 and ``cat_smooth`` 10), no early
  stopping, 2 threads.
- **<model> one process**: the single-process tf-keras reference of each deep model of
  ``--models`` (not ``lr``): the same model and its optimizers built in this process,
  no parameter servers, through the same input function, as
  :func:`single_process_reference` describes: one pass over the training window, or, when
  the config sets ``train.early_stopping``, up to ``train.epochs`` passes stopped on
  ``data.validation`` exactly as the zoo stops (the best pass's weights are scored).
- **<model> (zoo)**: our zoo through the real CLI: ``recsys-dist train`` on a local
  cluster of 2 workers and 2 parameter servers with ``--no-eval``, then ``recsys-dist
  evaluate`` on the held-out window and, with ``--dates``, on the training window; the
  figures come from ``metrics.json`` of ``evaluate --out``.

Wall time: for logreg the shared read and encoding plus that C's fit and held-out
scoring; for LightGBM the shared read, its own encoding, training and held-out scoring;
for the references training and held-out scoring; for the zoo the ``train`` and the
held-out ``evaluate`` commands, each with its own start-up. Scoring the training window is
left out everywhere.

The last line printed is ``best zoo minus best peer: X, lr minus logreg: Y`` (held-out
AUC; peers are logreg at its best C, LightGBM and the one-process references).

``--seeds 0-6`` runs every zoo model and one-process reference once per seed
(``train.seed`` and ``input.seed``; logreg and LightGBM do not depend on them and run
once). The table then holds each method's mean over the seeds, a second table each deep
model's held-out AUC seed by seed with the zoo's gap to its reference (mean and standard
error), and the last line ends with ``, zoo minus one process: MODEL Z, ...`` (the mean
gaps). One run scatters by a few thousandths from seed to seed on both sides.

Usage::

    python benchmarks/peer_quality.py [--rows-per-day 200000] [--models lr,dcn_v2,deepfm]
        [--out FILE.md]         # synthetic data, seed 11: train days 1-5, validate 6, eval 7
    python benchmarks/peer_quality.py --config configs/criteo.yaml \\
        --data CRITEO_ROOT --out FILE.md     # a dt= root of Criteo-format days
    python benchmarks/peer_quality.py --config configs/criteo.yaml --data CRITEO_ROOT \\
        --models wide_deep,dcn_v2,deepfm --c-grid 0.1 --seeds 0-4

Without ``--data`` it writes 7 days of synthetic data with ``recsys-dist data synth --days 7
--rows-per-day N --seed 11`` and uses ``configs/demo.yaml`` with train 2026-01-01..05,
validation 2026-01-06 and eval 2026-01-07, and every model (zoo and one-process
references) trains up to 10 passes with early stopping on the validation day
(``train.epochs=10``, ``train.early_stopping={patience: 1}``), as ``configs/criteo.yaml``
does on the Criteo sample. Given any of ``--train``, ``--eval`` and ``--validation``, the
default config keeps train 2026-01-01..05 and eval 2026-01-07 where not given, has a
validation day only with ``--validation``, and trains with its own settings (one pass).
Another config reads its own ``data.train``, ``data.validation`` and ``data.eval``, each
overridden by its option. The data are checked as ``recsys-dist validate`` checks them
before anything trains (``--check`` stops there). The peers need the ``bench`` extra:
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.config.model_registry import MODEL_REGISTRY
from recsys_dist.console import reporting_errors
from recsys_dist.errors import RecsysError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "demo.yaml"
SYNTH_TRAIN, SYNTH_VALIDATION = "2026-01-01..2026-01-05", "2026-01-06"
SYNTH_EVAL, SYNTH_DAYS, SYNTH_SEED = "2026-01-07", 7, 11
#: On the synthetic data every model picks its passes on the validation day, as
#: ``configs/criteo.yaml`` does on the Criteo sample.
SYNTH_EARLY_STOPPING = ["train.epochs=10", "train.early_stopping={patience: 1}"]
DEFAULT_MODELS = "lr,wide_deep,dcn_v2,deepfm"
#: The registered models that read rows without behaviour histories (the peers' data).
ZOO = tuple(name for name, spec in MODEL_REGISTRY.items() if not spec.needs_sequence)
C_GRID = (0.01, 0.1, 1.0)
#: LightGBM's setting; everything not named keeps LightGBM's default.
LIGHTGBM_PARAMS = {
    "objective": "binary",
    "num_leaves": 31,
    "learning_rate": 0.05,
    "num_threads": 2,
    "seed": 0,
    "verbose": -1,
}
LIGHTGBM_TREES = 300
#: ``--defaults``: LightGBM's own defaults (100 trees, 31 leaves, learning rate 0.1; one
#: thread, which on a loaded machine avoids OpenMP's spinning and changes no tree) and
#: scikit-learn's default logistic regression: C=1, its L2 objective solved to convergence
#: by liblinear (the default lbfgs reaches the same optimum, far slower on a million
#: sparse columns).
DEFAULT_LIGHTGBM_PARAMS = {"objective": "binary", "num_threads": 1, "seed": 0, "verbose": -1}
DEFAULT_LIGHTGBM_TREES = 100
DEFAULT_LOGREG = {"c_grid": (1.0,), "solver": "liblinear"}
#: ``--defaults``: the zoo in one process (the cluster is not what is measured there):
#: mirrored with one replica when every table is hashed, else one worker and one
#: parameter server in the command's process.
ONE_PROCESS_MIRRORED = ["cluster.mode=in_process", "cluster.strategy=mirrored", "cluster.workers=1"]
ONE_PROCESS_PS = ["cluster.mode=in_process", "cluster.workers=1", "cluster.ps=1"]
#: The peers' packages (module -> pip name), installed by the ``bench`` extra.
BENCH_PACKAGES = {
    "sklearn": "scikit-learn",
    "lightgbm": "lightgbm",
    "pandas": "pandas",
    "scipy": "scipy",
}
ORACLE = "oracle_logit"
SCORE_BATCH = 8192
CHUNK_ROWS = 131_072


class MissingPackages(RecsysError):
    """The peers' packages are not installed."""


def require_bench_packages() -> None:
    """Raises :class:`MissingPackages` (one line naming the extra) if a peer is missing."""
    missing = [
        pip for module, pip in BENCH_PACKAGES.items() if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise MissingPackages(
            f"benchmarks/peer_quality.py needs {', '.join(BENCH_PACKAGES.values())}; missing: "
            f"{', '.join(missing)}. Install them with: pip install -e '.[bench]'"
        )


# ---- inputs -----------------------------------------------------------------------------


@dataclasses.dataclass
class Inputs:
    """A checked config and its two windows.

    Attributes:
      config_path: The config file.
      overrides: ``--set`` items that make the config read this data and these windows
        (given to every method, the CLI included).
      config: The loaded config (its model is the config's own).
      pipelines: ``train`` / ``eval`` -> the planned split, as ``recsys-dist validate``
        plans it.
    """

    config_path: str
    overrides: list[str]
    config: Any
    pipelines: dict[str, Any]

    def rows(self, split: str) -> int:
        return self.pipelines[split].plan.total_rows

    def window(self, split: str) -> str:
        chosen = getattr(self.config.data, split)
        return chosen.dates if chosen.dates is not None else f"glob {chosen.glob}"


def window_overrides(
    data: str | None, train: str | None, eval_: str | None, validation: str | None = None
) -> list[str]:
    """``--set`` items for the data path and the train / eval / validation windows
    (dates)."""
    items = [f"data.path={os.path.abspath(data)}"] if data is not None else []
    items += [f"data.train={{dates: {train}}}"] if train else []
    items += [f"data.eval={{dates: {eval_}}}"] if eval_ else []
    items += [f"data.validation={{dates: {validation}}}"] if validation else []
    return items


def validate_inputs(config_path: str, overrides: list[str]) -> Inputs:
    """Loads the config and checks both windows as ``recsys-dist validate`` does (the same
    calls: :func:`~recsys_dist.config.load_config`, then
    :func:`~recsys_dist.data.input_fn.prepare_input` per split: files, footers, schema
    against the feature config, shard plan).

    Raises:
      RecsysError: the same errors as ``recsys-dist validate``: ``ConfigError`` for the
        config, ``DataError`` for a missing column, a window without partitions, a bad
        file...
    """
    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.errors import ConfigError

    config = load_config(config_path, overrides)
    for split in ("train", "eval"):
        if config.data is None or getattr(config.data, split) is None:
            raise ConfigError(
                config.file,
                f"data.{split}",
                "missing; the benchmark needs a "
                "training and a held-out window (--train / --eval FROM..TO)",
            )
    pipelines = {
        split: prepare_input(
            config, split, config.cluster.workers, optional_extra_columns=(ORACLE,)
        )
        for split in ("train", "eval")
    }
    return Inputs(config_path, list(overrides), config, pipelines)


# ---- rows of the table ------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One method's figures (AUC and logloss on the held-out window)."""

    method: str
    kind: str  # "peer" or "zoo"
    auc: float
    logloss: float
    train_auc: float
    seconds: float
    setting: str
    note: str = ""
    seed: int | None = None  # set on one seed's run of ``--seeds``

    def line(self) -> str:
        seed = f", seed {self.seed}" if self.seed is not None else ""
        return (
            f"{self.method}{seed}: held-out AUC {self.auc:.4f}, logloss {self.logloss:.4f}, "
            f"train-window AUC {self.train_auc:.4f}, {self.seconds:.0f} s"
            + (f" ({self.note})" if self.note else "")
        )

    def markdown(self) -> str:
        setting = self.setting + (f"; {self.note}" if self.note else "")
        return (
            f"| {self.method} | {self.auc:.4f} | {self.logloss:.4f} | {self.train_auc:.4f} "
            f"| {self.seconds:.0f} | {setting} |"
        )


def _metrics(
    labels: np.ndarray, logits: np.ndarray, weights: np.ndarray | None = None
) -> tuple[float, float]:
    from recsys_dist.evaluation.metrics import auc, logloss

    return auc(labels, logits, weights), logloss(labels, logits, weights)


# ---- reading the rows with pyarrow, and our transforms on them ----------------------------


def _scalar_tensor(array, dtype: str):
    """``(values, valid)`` of a scalar Arrow array, as the Parquet op returns them: nulls
    read as 0 / "" / false, with a validity flag."""
    import pyarrow as pa
    import tensorflow as tf

    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)
    if dtype == "string":
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            array = array.cast(pa.string())
        values = array.fill_null("").to_numpy(zero_copy_only=False)
        return tf.constant(values.astype(object), tf.string), tf.constant(valid)
    fill = False if dtype == "bool" else 0
    values = np.asarray(array.fill_null(fill).to_numpy(zero_copy_only=False)).astype(dtype)
    return tf.constant(values), tf.constant(valid)


def arrow_to_raw(batch, column_dtypes: dict[str, str]) -> tuple[dict, dict]:
    """``(raw, present)`` for :class:`FeatureTransform` from a pyarrow table or batch, with
    the columns read as ``column_dtypes`` says (the schema check's dtypes)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import tensorflow as tf

    from recsys_dist.data.schema_check import split_read_dtype

    raw, present = {}, {}
    for name, read_dtype in column_dtypes.items():
        array = batch.column(name)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        dtype, is_list = split_read_dtype(read_dtype)
        if is_list:
            lengths = np.asarray(pc.list_value_length(array).fill_null(0).to_numpy(), np.int64)
            values, valid = _scalar_tensor(array.flatten(), dtype)  # a null list is empty
            raw[name] = tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)
            present[name] = tf.RaggedTensor.from_row_lengths(valid, lengths, validate=False)
        else:
            raw[name], present[name] = _scalar_tensor(array, dtype)
    return raw, present


@dataclasses.dataclass
class SplitData:
    """One window read with pyarrow: per-file tables and the transform's outputs."""

    tables: list  # pyarrow tables, one per file, the columns the peers read
    labels: np.ndarray  # float64 0/1 of the measured label, valid rows only
    oracle: np.ndarray | None
    one_hot: Any  # scipy CSR of the lr inputs, valid rows only
    valid: np.ndarray  # bool per row over all tables


class OneHotEncoder:
    """The one-hot (plus dense numeric) encoding of a model input group's transform outputs.

    Columns: each hashed table the group's id-valued features read gets ``rows`` columns,
    one per table row, in the order the tables first appear; then one column per dense
    input (numeric feature, missing indicator) in :class:`FeatureEmbeddings`' order; then
    one column per (dynamic table, id) as ids are met (a dynamic table gives each id its
    own row), so :attr:`width` grows while windows are encoded: give every matrix the
    final width with :meth:`widen`.
    """

    def __init__(self, features, names: list[str]):
        self.tables: dict[str, int] = {}
        self.dynamic = set()
        self.id_features: dict[str, str] = {}
        self.combiners: dict[str, str] = {}
        self.dense: list[str] = []
        for name in names:
            feature = features.features[name]
            table = feature.table_name
            if table is None:
                self.dense.extend(feature.outputs())  # e.g. a numeric's "<name>.missing"
                continue
            self.id_features[name] = table
            combiner = feature.embedding_combiner(keep_sequences=False)
            if combiner is not None:
                self.combiners[name] = combiner
            if features.tables[table].dynamic:
                self.dynamic.add(table)
            elif table not in self.tables:
                self.tables[table] = features.tables[table].rows
        offsets = np.cumsum([0, *self.tables.values()])
        self.offsets = dict(zip(self.tables, offsets[:-1].tolist()))
        self.fixed_width = int(offsets[-1]) + len(self.dense)
        self.ids: dict[tuple[str, int], int] = {}  # (dynamic table, id) -> column

    @property
    def width(self) -> int:
        return self.fixed_width + len(self.ids)

    def _columns(self, table: str, ids: np.ndarray) -> np.ndarray:
        """The columns of a table's ids: its row's, or a dynamic table's id's own."""
        ids = ids.astype(np.int64)
        if table not in self.dynamic:
            return self.offsets[table] + ids
        distinct, inverse = np.unique(ids, return_inverse=True)
        columns = np.array(
            [
                self.ids.setdefault((table, key), self.fixed_width + len(self.ids))
                for key in distinct.tolist()
            ],
            np.int64,
        )
        return columns[inverse.reshape(-1)]

    def widen(self, matrix):
        """``matrix`` (CSR) with :attr:`width` columns (the ids met since it was encoded
        have none of its rows)."""
        matrix.resize((matrix.shape[0], self.width))
        return matrix

    def encode(self, features: dict, keep: np.ndarray):
        """A CSR matrix ``[kept rows, width]`` of one chunk's transform outputs."""
        import scipy.sparse as sp

        n = int(keep.shape[0])
        rows, cols, vals = [], [], []
        arange = np.arange(n, dtype=np.int64)
        for name, table in self.id_features.items():
            value = features[name]
            if name in self.combiners:
                ids, weights = value["ids"].numpy(), value["weights"].numpy().astype(np.float64)
                if self.combiners[name] == "sum":
                    divisor = np.ones(n)
                elif self.combiners[name] == "mean":
                    divisor = weights.sum(axis=1)
                else:
                    divisor = np.sqrt(np.square(weights).sum(axis=1))
                row, slot = np.nonzero(weights)
                scale = np.divide(1.0, divisor, out=np.zeros(n), where=divisor != 0)
                rows.append(row.astype(np.int64))
                cols.append(self._columns(table, ids[row, slot]))
                vals.append(weights[row, slot] * scale[row])
            else:
                rows.append(arange)
                cols.append(self._columns(table, value.numpy()))
                vals.append(np.ones(n))
        first_dense = self.fixed_width - len(self.dense)
        for k, name in enumerate(self.dense):
            x = features[name].numpy().astype(np.float64)
            nonzero = np.flatnonzero(x)
            rows.append(nonzero.astype(np.int64))
            cols.append(np.full(nonzero.shape, first_dense + k, np.int64))
            vals.append(x[nonzero])
        matrix = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(n, self.width),
        )  # duplicates (shared tables) add up
        return matrix[np.flatnonzero(keep)]


def sp_vstack(blocks: list):
    """CSR blocks of one width stacked (scipy's ``vstack``)."""
    import scipy.sparse as sp

    return sp.vstack(blocks, format="csr")


def read_split(
    inputs: Inputs,
    split: str,
    encoder: OneHotEncoder,
    columns: list[str],
    log: Callable[[str], None],
) -> SplitData:
    """Reads a window's files with pyarrow and encodes them through our transforms.

    ``columns``: extra raw columns to keep for LightGBM (besides the transform's)."""
    import pyarrow.parquet as pq
    import scipy.sparse as sp
    import tensorflow as tf

    pipeline = inputs.pipelines[split]
    transform = pipeline.transform
    label = inputs.config.labels[0]
    oracle = ORACLE in pipeline.extra_columns
    wanted = list(dict.fromkeys(transform.columns + columns + ([ORACLE] if oracle else [])))
    tables, labels, oracles, blocks, valids = [], [], [], [], []
    started = time.perf_counter()
    for path in pipeline.plan.files:
        table = pq.read_table(path, columns=wanted)
        tables.append(table)
        for start in range(0, table.num_rows, CHUNK_ROWS):
            chunk = table.slice(start, CHUNK_ROWS)
            raw, present = arrow_to_raw(chunk, transform.column_dtypes)
            features, chunk_labels, valid = transform(
                raw, tf.constant(path), tf.constant(start, tf.int64), present
            )
            keep = valid.numpy() > 0
            valids.append(keep)
            labels.append(chunk_labels[label].numpy()[keep].astype(np.float64))
            if oracle:
                column = chunk.column(ORACLE).to_numpy(zero_copy_only=False)
                oracles.append(np.asarray(column, np.float64)[keep])
            blocks.append(encoder.encode(features, keep))
    log(
        f"read and encoded the {split} window ({sum(t.num_rows for t in tables):,} rows, "
        f"{len(tables)} files) in {time.perf_counter() - started:.0f} s"
    )
    return SplitData(
        tables,
        np.concatenate(labels),
        np.concatenate(oracles) if oracle else None,
        sp.vstack([encoder.widen(b) for b in blocks], format="csr"),
        np.concatenate(valids),
    )


# ---- the peers ---------------------------------------------------------------------------


def logreg_rows(
    train: SplitData,
    held_out: SplitData,
    c_grid: tuple[float, ...],
    solver: str,
    max_iter: int,
    shared_seconds: float,
    report: Callable[[Row], None],
) -> list[Row]:
    """One L2 logistic regression per C, on the one-hot encoding."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    rows = []
    for c in c_grid:
        started = time.perf_counter()
        model = LogisticRegression(C=c, solver=solver, max_iter=max_iter, tol=1e-4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            model.fit(train.one_hot, train.labels)
        auc, loss = _metrics(held_out.labels, model.decision_function(held_out.one_hot))
        seconds = shared_seconds + time.perf_counter() - started
        train_auc, _ = _metrics(train.labels, model.decision_function(train.one_hot))
        iterations = int(np.max(model.n_iter_))
        converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        note = (
            f"converged in {iterations} iterations"
            if converged
            else f"DID NOT CONVERGE in {iterations} iterations (max_iter {max_iter})"
        )
        row = Row(
            f"logreg C={c:g}",
            "peer",
            auc,
            loss,
            train_auc,
            seconds,
            f"sklearn LogisticRegression, L2, {solver}, {train.one_hot.shape[1]:,} columns",
            note,
        )
        report(row)
        rows.append(row)
    best = max(rows, key=lambda r: r.auc)
    edge = len(c_grid) > 1 and rows.index(best) in (0, len(rows) - 1)
    best.note = (
        "best C, at the edge of the grid (widen --c-grid); " if edge else "best C; "
    ) + best.note
    return rows


def _lightgbm_matrix(
    tables: list, categorical: list[str], numeric: list[str], codes: dict[str, Any] | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The raw columns as a float matrix: categorical ones as pandas category codes (of
    ``codes``, or learned here), nulls and unseen ids as NaN; numeric ones as they are."""
    import pandas as pd
    import pyarrow as pa

    learned = {} if codes is None else codes
    matrix = np.empty((sum(t.num_rows for t in tables), len(categorical) + len(numeric)))
    for j, name in enumerate(categorical + numeric):
        column = pa.chunked_array(
            [c for t in tables for c in t.column(name).chunks],
            type=tables[0].schema.field(name).type,
        )
        if name in categorical:
            values = column.to_pandas()
            if codes is None:
                code, learned[name] = pd.factorize(values, use_na_sentinel=True)
            else:
                code = learned[name].get_indexer(values)
            matrix[:, j] = np.where(code < 0, np.nan, code)
        else:
            matrix[:, j] = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return matrix, learned


def lightgbm_row(
    config,
    train: SplitData,
    held_out: SplitData,
    shared_seconds: float,
    params: dict | None = None,
    trees: int = LIGHTGBM_TREES,
) -> Row:
    """LightGBM on the raw columns, categoricals declared (``params``: default
    :data:`LIGHTGBM_PARAMS`)."""
    import lightgbm as lgb

    categorical, numeric = lightgbm_columns(config)
    started = time.perf_counter()
    x_train, codes = _lightgbm_matrix(train.tables, categorical, numeric, None)
    x_eval, _ = _lightgbm_matrix(held_out.tables, categorical, numeric, codes)
    x_train, x_eval = x_train[train.valid], x_eval[held_out.valid]
    names = categorical + numeric
    dataset = lgb.Dataset(
        x_train,
        label=train.labels,
        feature_name=names,
        categorical_feature=categorical,
        free_raw_data=True,
    )
    params = LIGHTGBM_PARAMS if params is None else params
    booster = lgb.train(params, dataset, num_boost_round=trees)
    auc, loss = _metrics(held_out.labels, booster.predict(x_eval, raw_score=True))
    seconds = shared_seconds + time.perf_counter() - started
    train_auc, _ = _metrics(train.labels, booster.predict(x_train, raw_score=True))
    return Row(
        "lightgbm",
        "peer",
        auc,
        loss,
        train_auc,
        seconds,
        f"LightGBM {trees} trees, {params.get('num_leaves', 31)} leaves, "
        f"lr {params.get('learning_rate', 0.1)}; {len(categorical)} categorical + "
        f"{len(numeric)} numeric raw columns",
    )


def lightgbm_columns(config) -> tuple[list[str], list[str]]:
    """The raw columns LightGBM reads: the columns of single ids (categorical features)
    and of numbers (numeric features); multi-valued features and crosses are left out."""
    features = config.features
    reads = [r for f in features.features.values() for r in f.column_reads(features)]
    categorical = list(dict.fromkeys(r.column for r in reads if r.need in ("integer id", "string")))
    numeric = list(
        dict.fromkeys(r.column for r in reads if r.need == "number" and r.column not in categorical)
    )
    return categorical, numeric


# ---- the single-process reference ----------------------------------------------------------


#: model -> its scoring function (see :func:`_score`).
_PREDICT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _score(model, config, split: str) -> dict[str, float]:
    """AUC and logloss of the first label on a split, scored with ``training=False`` in
    this process (plus the oracle's, when the data stores it)."""
    import tensorflow as tf

    from recsys_dist.data.input_fn import prepare_input

    label = config.labels[0]
    spec = dataclasses.replace(config.input, batch_size=max(SCORE_BATCH, config.input.batch_size))
    pipeline = prepare_input(config, split, 1, spec=spec, optional_extra_columns=(ORACLE,))
    predict = _PREDICT.get(model)
    if predict is None:  # one function per model: scored after every pass, traced once
        predict = _PREDICT[model] = tf.function(
            lambda features: model(features, training=False)[label],
            autograph=False,
            reduce_retracing=True,
        )
    labels, logits, weights, oracle = [], [], [], []
    for batch in pipeline.local_dataset(training=False):
        logits.append(predict(batch["features"]).numpy())
        labels.append(batch["labels"][label].numpy())
        weights.append(batch["valid"].numpy())
        if ORACLE in pipeline.extra_columns:
            oracle.append(batch["extra"][ORACLE].numpy())
    y, z, w = (np.concatenate(a) for a in (labels, logits, weights))
    result = dict(zip(("auc", "logloss"), _metrics(y, z, w)), rows=len(y))
    if oracle:
        result["oracle_auc"], result["oracle_logloss"] = _metrics(y, np.concatenate(oracle), w)
    return result


def single_process_reference(
    config, score_train: bool = False, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Trains ``config``'s model in this process, without parameter servers, and scores it.

    It builds the model and its optimizers (the trainer's
    :class:`~recsys_dist.train.optimizers.ModelOptimizers`: embedding, dense and, when set,
    linear) in this process and trains through the same input function as the cluster
    (one reader, shuffled units and rows, the trainer's own loss): one pass over the
    training split, or with ``train.early_stopping`` up to ``train.epochs`` passes (each
    with its own shuffle), scoring ``data.validation`` after each and stopping as the
    trainer does; the best pass's weights are kept. Then it scores the evaluation split
    (and with ``score_train`` the training split) with ``training=False``.

    Returns:
      ``{"steps", "train_seconds", "seconds" (training and held-out scoring), "eval":
      {"auc", "logloss", "rows"[, "oracle_auc", "oracle_logloss"]}, "train": same or None,
      "best_epoch": the pass whose weights were scored}``.
    """
    import tensorflow as tf

    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.zoo import build_from_config
    from recsys_dist.train.optimizers import ModelOptimizers
    from recsys_dist.train.step import replica_loss

    model = build_from_config(config)
    steps_per_epoch = None  # what a learning-rate decay per pass needs, as in the trainer
    if config.train.lr_decay_per_epoch is not None:
        rows = prepare_input(config, "train", 1).plan.total_rows
        steps_per_epoch = math.ceil(rows / config.input.batch_size)
    optimizers = ModelOptimizers(
        model, config.train, config.input.batch_size, steps_per_epoch=steps_per_epoch
    )
    table_vars, dense_vars = model.embedding_variables, model.dense_variables

    @tf.function(autograph=False)
    def step(batch):
        with tf.GradientTape() as tape:  # the trainer's own loss, for one replica
            logits = model(batch["features"], training=True)
            loss, _ = replica_loss(
                logits, batch["labels"], batch["valid"], config.labels, 1, model.losses
            )
        grads = tape.gradient(loss, table_vars + dense_vars)
        optimizers.apply(grads[: len(table_vars)], grads[len(table_vars) :])
        return loss

    started = time.perf_counter()
    steps, best_epoch = _train_passes(config, model, step, log)
    train_seconds = time.perf_counter() - started
    held_out = _score(model, config, "eval")
    seconds = time.perf_counter() - started
    return {
        "steps": steps,
        "train_seconds": train_seconds,
        "seconds": seconds,
        "eval": held_out,
        "train": _score(model, config, "train") if score_train else None,
        "best_epoch": best_epoch,
    }


def _train_passes(config, model, step, log: Callable[[str], None]) -> tuple[int, int]:
    """One pass, or with ``train.early_stopping`` passes until it stops, leaving the best
    pass's weights in ``model``; returns ``(steps, best pass)``."""
    from recsys_dist.train.early_stopping import EarlyStopping

    spec = config.train.early_stopping
    stopping = EarlyStopping(spec, spec.label or config.labels[0]) if spec else None
    steps, best_weights = 0, None
    for epoch in range(1, (config.train.epochs if stopping else 1) + 1):
        model.count_sightings(epoch == 1)  # admission counts pass 1 only, as in the trainer
        steps += _one_pass(config, step, epoch, log)
        if stopping is None:
            return steps, 1
        stop = stopping.record(epoch, steps, _score(model, config, "validation")[stopping.metric])
        log(stopping.describe_last())
        if stopping.best["epoch"] == epoch:
            best_weights = [v.numpy() for v in model.variables]
        if stop:
            break
    for variable, value in zip(model.variables, best_weights):
        variable.assign(value)
    return steps, stopping.best["epoch"]


def _one_pass(config, step, epoch: int, log: Callable[[str], None]) -> int:
    """One pass over the training split (pass ``epoch`` shuffles with its own seed);
    returns its steps."""
    from recsys_dist.data.input_fn import prepare_input

    spec = dataclasses.replace(config.input, seed=config.input.seed + epoch - 1)
    train = prepare_input(config, "train", 1, spec=spec)
    steps, recent = 0, []
    for batch in train.local_dataset(training=True):
        recent = (recent + [float(step(batch))])[-500:]
        steps += 1
        if steps % 1000 == 0:
            log(f"epoch {epoch} step {steps:,}: loss of the last 500 steps {np.mean(recent):.4f}")
    return steps


# ---- the zoo through the CLI ----------------------------------------------------------------


def model_overrides(config, model: str) -> list[str]:
    """``--set`` items that switch the config to ``model`` (its other ``model.params``
    are dropped by the config loader; the model's defaults apply)."""
    items = [f"model.name={model}"]
    if model == config.model.name:
        return items  # the config's own inputs and params
    if config.model.inputs is not None:
        items.append("model.inputs=null")  # the groups of the config's model
    if model == "wide_deep":
        wide = [
            n for n, f in config.features.features.items() if f.kind in ("categorical", "cross")
        ]
        items.append(
            "model.inputs={wide: ["
            + ", ".join(wide)
            + "], deep: ["
            + ", ".join(config.features.features)
            + "]}"
        )
    elif model == "mmoe" and len(config.features.labels) >= 2:
        items.append("model.labels=[" + ", ".join(config.features.labels) + "]")
    return items


CLUSTER = ["cluster.mode=local", "cluster.workers=2", "cluster.ps=2"]


def cli(*args: str, log_file: pathlib.Path) -> float:
    """Runs ``recsys-dist ARGS`` with this worktree's code; returns its wall seconds.

    Raises:
      RecsysError: the command failed (its last lines are in the message).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    )
    command = [sys.executable, "-m", "recsys_dist.cli", *args]
    started = time.perf_counter()
    with open(log_file, "w", encoding="utf-8") as log:
        code = subprocess.run(
            command, check=False, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        ).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        tail = log_file.read_text(encoding="utf-8").strip().splitlines()[-3:]
        raise RecsysError(f"recsys-dist {args[0]} exited with {code}: " + " / ".join(tail))
    return seconds


def zoo_row(
    inputs: Inputs,
    model: str,
    work: pathlib.Path,
    tag: str = "",
    cluster: list[str] = CLUSTER,
    score_train: bool = True,
) -> Row:
    """Trains ``model`` with ``recsys-dist train --no-eval`` on ``cluster`` (default a
    local cluster of 2 workers and 2 parameter servers) and scores it with ``recsys-dist
    evaluate`` on the held-out window and, with ``score_train``, the training window
    (logs ``work/MODEL{tag}-*.log``)."""
    model_dir = work / "zoo" / model
    shutil.rmtree(model_dir, ignore_errors=True)
    model_dir.mkdir(parents=True)
    sets = [
        a
        for item in [*inputs.overrides, *cluster, *model_overrides(inputs.config, model)]
        for a in ("--set", item)
    ]
    base = ["--config", inputs.config_path, "--model-dir", str(model_dir), *sets]
    label = inputs.config.labels[0]
    train_auc = math.nan
    if not score_train:  # the held-out window scored by train itself: one process less
        seconds = cli("train", *base, log_file=work / f"{model}{tag}-train.log")
        result = json.loads((model_dir / "train_result.json").read_text())
        held_out = result["eval"]["labels"][label]
        best = (result.get("early_stopping") or {}).get("best")
        return Row(
            f"{model} (zoo)",
            "zoo",
            held_out["auc"],
            held_out["logloss"],
            train_auc,
            seconds,
            "recsys-dist train (held-out window scored by train), "
            + ", ".join(item.split(".", 1)[1] for item in cluster)
            + (f"; best epoch {best['epoch']}" if best else ""),
        )
    seconds = cli("train", *base, "--no-eval", log_file=work / f"{model}{tag}-train.log")
    seconds += cli(
        "evaluate",
        *base,
        "--out",
        str(model_dir / "eval"),
        "--quiet",
        log_file=work / f"{model}{tag}-evaluate.log",
    )
    if score_train:
        train_split = inputs.config.data.train
        window = (
            ["--dates", train_split.dates]
            if train_split.dates is not None
            else ["--set", f"data.eval={{glob: '{train_split.glob}'}}"]
        )
        cli(
            "evaluate",
            *base,
            "--out",
            str(model_dir / "eval_train"),
            "--quiet",
            *window,
            log_file=work / f"{model}{tag}-evaluate-train.log",
        )
        on_train = json.loads((model_dir / "eval_train" / "metrics.json").read_text())
        train_auc = on_train["labels"][label]["auc"]
    held_out = json.loads((model_dir / "eval" / "metrics.json").read_text())["labels"][label]
    result = json.loads((model_dir / "train_result.json").read_text())
    rate = result.get("examples_per_second")
    best = (result.get("early_stopping") or {}).get("best")
    where = (
        "2 workers + 2 ps (local)"
        if cluster == CLUSTER
        else ", ".join(item.split(".", 1)[1] for item in cluster)
    )
    return Row(
        f"{model} (zoo)",
        "zoo",
        held_out["auc"],
        held_out["logloss"],
        train_auc,
        seconds,
        f"recsys-dist train --no-eval, {where}, then evaluate"
        + (f"; {rate:,.0f} train ex/s" if rate else "")
        + (f"; best epoch {best['epoch']}" if best else ""),
    )


def reference_row(
    inputs: Inputs, model: str, log: Callable[[str], None], score_train: bool = True
) -> Row:
    from recsys_dist.config import load_config

    config = load_config(
        inputs.config_path, [*inputs.overrides, *model_overrides(inputs.config, model)]
    )
    result = single_process_reference(config, score_train=score_train, log=log)
    held_out, on_train = result["eval"], result["train"]
    stopping = config.train.early_stopping is not None
    return Row(
        f"{model} one process",
        "peer",
        held_out["auc"],
        held_out["logloss"],
        on_train["auc"] if on_train else math.nan,
        result["seconds"],
        f"tf-keras in this process, no parameter servers, {result['steps']:,} steps"
        + (f", best epoch {result['best_epoch']}" if stopping else ""),
    )


# ---- the run -------------------------------------------------------------------------------


def with_seed(inputs: Inputs, seed: int | None) -> Inputs:
    """``inputs`` whose runs use ``seed`` for the model's initializers (``train.seed``) and
    the input's shuffling (``input.seed``); ``None``: the config's own."""
    if seed is None:
        return inputs
    return dataclasses.replace(
        inputs, overrides=[*inputs.overrides, f"train.seed={seed}", f"input.seed={seed}"]
    )


def mean_row(runs: list[Row]) -> Row:
    """One method's runs over the seeds of ``--seeds`` as one row: the mean of each figure,
    wall time summed, each seed's held-out AUC in the setting."""
    aucs = ", ".join(f"{r.auc:.4f}" for r in runs)
    seeds = ", ".join(str(r.seed) for r in runs)
    return Row(
        f"{runs[0].method} (mean of {len(runs)} seeds)",
        runs[0].kind,
        float(np.mean([r.auc for r in runs])),
        float(np.mean([r.logloss for r in runs])),
        float(np.mean([r.train_auc for r in runs])),
        sum(r.seconds for r in runs),
        f"{runs[0].setting} (seed {runs[0].seed}); seeds {seeds}: AUC {aucs}, "
        f"standard error {standard_error([r.auc for r in runs]):.4f}",
    )


def standard_error(values: list[float]) -> float:
    """The standard error of the mean of ``values`` (0 for one value)."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def seed_differences(runs: list[Row]) -> dict[str, list[float]]:
    """Model -> its zoo AUC minus its one-process AUC, seed by seed (deep models of a
    ``--seeds`` run)."""
    by = {(r.method, r.seed): r.auc for r in runs}
    out: dict[str, list[float]] = {}
    for method, seed in by:
        if method.endswith(" (zoo)"):
            model = method[: -len(" (zoo)")]
            reference = by.get((f"{model} one process", seed))
            if reference is not None:
                out.setdefault(model, []).append(by[(method, seed)] - reference)
    return out


def paired_table(runs: list[Row], seeds: list[int]) -> str:
    """Per deep model and seed: one process, zoo and their difference; then the mean
    difference and its standard error over the seeds."""
    by = {(r.method, r.seed): r.auc for r in runs}
    lines = [
        "| model | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | standard error |",
        "|---|" + "---|" * (len(seeds) + 2),
    ]
    for model, diffs in seed_differences(runs).items():
        for method in (f"{model} one process", f"{model} (zoo)"):
            values = [by[(method, s)] for s in seeds]
            lines.append(
                f"| {method} | "
                + " | ".join(f"{v:.4f}" for v in values)
                + f" | {np.mean(values):.4f} | |"
            )
        error = standard_error(diffs)
        lines.append(
            f"| {model}: zoo minus one process | "
            + " | ".join(f"{d:+.4f}" for d in diffs)
            + f" | {np.mean(diffs):+.4f} | {error:.4f} |"
        )
    return "\n".join(lines) + "\n"


def summary(rows: list[Row], runs: list[Row] = ()) -> str:
    """``best zoo minus best peer: X, lr minus logreg: Y`` (held-out AUC), then with
    ``--seeds`` (``runs``: every seed's rows) ``, zoo minus one process: MODEL Z`` (mean
    over the seeds) per deep model."""
    zoo = [r for r in rows if r.kind == "zoo"]
    peers = [r for r in rows if r.kind == "peer"]
    best = f"{max(r.auc for r in zoo) - max(r.auc for r in peers):+.4f}" if zoo and peers else "n/a"
    lr = [r for r in zoo if r.method.startswith("lr (zoo)")]
    logreg = [r for r in peers if r.method.startswith("logreg")]
    versus = f"{lr[0].auc - max(r.auc for r in logreg):+.4f}" if lr and logreg else "n/a"
    line = f"best zoo minus best peer: {best}, lr minus logreg: {versus}"
    gaps = seed_differences(list(runs))
    if gaps:
        line += ", zoo minus one process: " + ", ".join(
            f"{model} {np.mean(diffs):+.4f}" for model, diffs in gaps.items()
        )
    return line


#: The targets of ``--defaults`` (held-out AUC, means over the seeds).
LR_TO_LOGREG, BEST_TO_PEERS, ZOO_TO_REFERENCE = -0.003, -0.002, -0.002


def targets(rows: list[Row], runs: list[Row]) -> list[str]:
    """``--defaults``: one line per target, ``met`` or ``NOT met`` with the figures: ``lr``
    against scikit-learn's default logistic regression (at least -0.003), the best zoo
    model against the better of LightGBM and that regression (at least -0.002), each deep
    model against its one-process reference (mean gap over the seeds at least -0.002, with
    its standard error)."""

    def verdict(value: float, bar: float) -> str:
        return "met" if value >= bar else "NOT met"

    zoo = [r for r in rows if r.kind == "zoo"]
    peers = [r for r in rows if r.kind == "peer"]
    lines = []
    lr = [r for r in zoo if r.method.startswith("lr (zoo)")]
    logreg = [r for r in peers if r.method.startswith("logreg")]
    if lr and logreg:
        gap = lr[0].auc - max(r.auc for r in logreg)
        lines.append(
            f"target lr >= logreg {LR_TO_LOGREG:+.3f}: {gap:+.4f} {verdict(gap, LR_TO_LOGREG)}"
        )
    shallow = [r for r in peers if r.method.startswith(("logreg", "lightgbm"))]
    if zoo and shallow:
        best_zoo, best_peer = max(zoo, key=lambda r: r.auc), max(shallow, key=lambda r: r.auc)
        gap = best_zoo.auc - best_peer.auc
        lines.append(
            f"target best zoo >= best peer {BEST_TO_PEERS:+.3f}: {best_zoo.method} "
            f"{best_zoo.auc:.4f} vs {best_peer.method} {best_peer.auc:.4f}: {gap:+.4f} "
            f"{verdict(gap, BEST_TO_PEERS)}"
        )
    for model, diffs in seed_differences(runs).items():
        gap = float(np.mean(diffs))
        lines.append(
            f"target {model} >= one process {ZOO_TO_REFERENCE:+.3f}: {gap:+.4f} "
            f"(standard error {standard_error(diffs):.4f}) "
            f"{verdict(gap, ZOO_TO_REFERENCE)}"
        )
    return lines


def table(rows: list[Row], header: str) -> str:
    columns = "| method | held-out AUC | held-out logloss | train-window AUC | wall s | setting |"
    return (
        "\n".join([header, "", columns, "|---|---|---|---|---|---|", *(r.markdown() for r in rows)])
        + "\n"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        default=str(DEFAULT_CONFIG),
        help="model/training config (default configs/demo.yaml)",
    )
    parser.add_argument(
        "--data", help="root of dt=YYYY-MM-DD partitions (default: write synthetic data)"
    )
    parser.add_argument(
        "--rows-per-day",
        type=int,
        default=200_000,
        help="rows per day of the synthetic data (default 200000)",
    )
    parser.add_argument(
        "--train",
        help="training window FROM..TO (default: 2026-01-01..05 "
        "with the default config, else the config's)",
    )
    parser.add_argument(
        "--eval",
        help="held-out window FROM..TO (default: 2026-01-07 with "
        "the default config, else the config's)",
    )
    parser.add_argument(
        "--validation",
        help="validation window FROM..TO (default: "
        "2026-01-06 with the default config and "
        "windows, with early stopping; else the "
        "config's)",
    )
    parser.add_argument(
        "--models",
        default=None,
        help=f"zoo models, comma-separated (default {DEFAULT_MODELS}, with "
        "--defaults every one; any of " + ", ".join(ZOO) + ")",
    )
    parser.add_argument(
        "--c-grid",
        default=",".join(f"{c:g}" for c in C_GRID),
        help="C values of the logistic regression (default 0.01,0.1,1)",
    )
    parser.add_argument(
        "--logreg-solver",
        default="liblinear",
        choices=["liblinear", "lbfgs", "saga", "newton-cg", "sag"],
    )
    parser.add_argument("--logreg-max-iter", type=int, default=1000)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key for every method",
    )
    parser.add_argument(
        "--work-dir",
        help="keep data, runs and logs here (default: a temporary directory, removed at the end)",
    )
    parser.add_argument("--out", help="also write the table as Markdown to this file")
    parser.add_argument(
        "--json", help="also write every row and every seed's run to this file as JSON"
    )
    parser.add_argument(
        "--leave-one-out",
        action="store_true",
        help="with --defaults: choose the defaults leaving one public dataset out "
        "(benchmarks/leave_one_out.py; --data is the root holding one directory per "
        "dataset, --work-dir keeps and reuses every run)",
    )
    parser.add_argument(
        "--datasets",
        default="ml1m_subset,ciao,yahoo_r3,talkingdata",
        help="with --leave-one-out: the datasets of benchmarks/datasets/, comma-separated",
    )
    parser.add_argument(
        "--seeds",
        help="run every zoo model and one-process reference once "
        "per seed (train.seed and input.seed), e.g. 0-6 or "
        "0,3,5, and report their means and the zoo's gap "
        "to its reference seed by seed (default: one run "
        "with the config's seeds)",
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="every method with its defaults alone: the config's feature "
        "config (sequence features left out), data and model, nothing "
        "else; scikit-learn's default logistic regression and LightGBM's "
        "defaults; the zoo in one process; targets checked at the end",
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help="leave out logistic regression and LightGBM (e.g. more seeds of "
        "a run whose peers were already measured)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check the config and data (as recsys-dist validate)",
    )
    args = parser.parse_args(argv)
    models = args.models or (",".join(ZOO) if args.defaults else DEFAULT_MODELS)
    args.models = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(ZOO)}")
    args.c_grid = tuple(sorted(float(c) for c in args.c_grid.split(",")))
    args.seeds = parse_seeds(args.seeds, parser.error) if args.seeds else []
    return args


def parse_seeds(text: str, error: Callable[[str], None]) -> list[int]:
    """``0-6`` or ``0,3,5`` (or both, ``0-2,9``) -> the seeds in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            span = range(int(first), int(last or first) + 1)
        except ValueError:
            span = range(0)
        if not span:
            error(
                f"--seeds: {part.strip()!r} is not a seed (a whole number >= 0) nor a "
                "range FIRST-LAST; give e.g. 0-6 or 0,3,5"
            )
        seeds += span
    return list(dict.fromkeys(seeds))


def defaults_config(config_path: str, work: pathlib.Path) -> str:
    """``--defaults``: writes ``work/defaults.yaml``, a config with only the feature config
    and the data section of ``config_path`` (and model ``lr``, which reads every feature;
    each method switches to its own), and ``work/features.yaml``, its
    feature config without sequence features (the peers read no histories; a table only a
    history read goes too). Returns the config's path."""
    import yaml

    from recsys_dist.config import load_config

    config = load_config(config_path)
    features = yaml.safe_load(pathlib.Path(config.features.file).read_text(encoding="utf-8"))
    base = pathlib.Path(config.features.file).resolve().parent
    kept = {
        name: spec for name, spec in features["features"].items() if spec.get("kind") != "sequence"
    }
    for spec in kept.values():
        if isinstance(spec.get("vocabulary"), str):
            spec["vocabulary"] = str((base / spec["vocabulary"]).resolve())
    read = {spec.get("table") for spec in kept.values()}
    features["features"] = kept
    features["tables"] = {t: v for t, v in (features.get("tables") or {}).items() if t in read}
    (work / "features.yaml").write_text(yaml.safe_dump(features, sort_keys=False))
    data = {
        k: v
        for k, v in config.raw["data"].items()
        if k in ("path", "train", "validation", "eval", "partition_key")
    }
    text = yaml.safe_dump(
        {"features": str(work / "features.yaml"), "data": data, "model": {"name": "lr"}},
        sort_keys=False,
    )
    (work / "defaults.yaml").write_text(text)
    return str(work / "defaults.yaml")


def synthesize(work: pathlib.Path, rows_per_day: int) -> str:
    data = work / "data"
    cli(
        "data",
        "synth",
        "--out",
        str(data),
        "--days",
        str(SYNTH_DAYS),
        "--rows-per-day",
        str(rows_per_day),
        "--seed",
        str(SYNTH_SEED),
        "--quiet",
        log_file=work / "synth.log",
    )
    return str(data)


def run_peers(
    args: argparse.Namespace,
    inputs: Inputs,
    config_file: str,
    rows: list[Row],
    log: Callable[[str], None],
) -> str:
    """Logistic regression (one row per C) and LightGBM, appended to ``rows``; returns the
    oracle's sentence for the table's header ('' without an oracle column)."""
    from recsys_dist.config import load_config

    lr_config = load_config(config_file, inputs.overrides + model_overrides(inputs.config, "lr"))
    encoder = OneHotEncoder(lr_config.features, lr_config.inputs["wide"])
    categorical, numeric = lightgbm_columns(inputs.config)
    started = time.perf_counter()
    splits = {
        s: read_split(inputs, s, encoder, categorical + numeric, log) for s in ("eval", "train")
    }
    for split in splits.values():  # the ids of dynamic tables met in either window
        split.one_hot = encoder.widen(split.one_hot)
    shared = time.perf_counter() - started
    oracle = ""
    if splits["eval"].oracle is not None:
        oracle = (
            f" Oracle (the data's true logit): held-out AUC "
            f"{_metrics(splits['eval'].labels, splits['eval'].oracle)[0]:.4f}, "
            f"train-window AUC "
            f"{_metrics(splits['train'].labels, splits['train'].oracle)[0]:.4f}."
        )
    log(f"logistic regression, C in {args.c_grid}")
    logreg = logreg_rows(
        splits["train"],
        splits["eval"],
        args.c_grid,
        args.logreg_solver,
        args.logreg_max_iter,
        shared,
        lambda r: print(r.line(), flush=True),
    )
    rows.extend(logreg)
    print(f"logreg best C: {max(logreg, key=lambda r: r.auc).method}", flush=True)
    log("LightGBM")
    rows.append(
        lightgbm_row(
            inputs.config,
            splits["train"],
            splits["eval"],
            shared,
            *((DEFAULT_LIGHTGBM_PARAMS, DEFAULT_LIGHTGBM_TREES) if args.defaults else ()),
        )
    )
    print(rows[-1].line(), flush=True)
    return oracle


def unfit_models(inputs: Inputs, models: list[str]) -> dict[str, str]:
    """Model -> why it cannot be built on this data (its own error, e.g. DLRM without a
    numeric feature), for the models of ``models`` that cannot; builds each once."""
    from recsys_dist.config import load_config
    from recsys_dist.models.zoo import build_from_config

    unfit = {}
    for model in models:
        try:
            config = load_config(
                inputs.config_path, [*inputs.overrides, *model_overrides(inputs.config, model)]
            )
            build_from_config(config)
        except (ValueError, RecsysError) as exc:
            unfit[model] = str(exc).splitlines()[0]
    return unfit


def run(args: argparse.Namespace, work: pathlib.Path) -> int:
    def log(line: str) -> None:
        print(f"  ... {line}", file=sys.stderr, flush=True)

    default_config = pathlib.Path(args.config).resolve() == DEFAULT_CONFIG
    synthetic_windows = default_config and not (args.train or args.eval or args.validation)
    train = args.train or (SYNTH_TRAIN if default_config else None)
    eval_ = args.eval or (SYNTH_EVAL if default_config else None)
    validation = args.validation or (SYNTH_VALIDATION if synthetic_windows else None)
    stopping = SYNTH_EARLY_STOPPING if synthetic_windows and not args.defaults else []
    if not args.check:
        require_bench_packages()
    data = args.data
    if data is None:
        log(
            f"writing synthetic data: {SYNTH_DAYS} days x {args.rows_per_day:,} rows, "
            f"seed {SYNTH_SEED}"
        )
        data = synthesize(work, args.rows_per_day)
    config_file = args.config
    if args.defaults:  # the config's features, data and model, nothing else
        config_file = defaults_config(args.config, work)
        args.c_grid, args.logreg_solver = DEFAULT_LOGREG["c_grid"], DEFAULT_LOGREG["solver"]
    inputs = validate_inputs(
        os.path.abspath(config_file),
        window_overrides(data, train, eval_, validation) + stopping + args.set,
    )
    described = (
        f"{inputs.window('train')} ({inputs.rows('train'):,} rows) for training, "
        f"{inputs.window('eval')} ({inputs.rows('eval'):,} rows) held out"
    )
    if inputs.config.data.validation is not None:
        described += f", {inputs.window('validation')} for validation"
    print(f"inputs OK: {data}: {described}", flush=True)
    if args.check:
        return 0

    rows: list[Row] = []
    oracle = "" if args.no_peers else run_peers(args, inputs, config_file, rows, log)
    runs: list[Row] = []  # every model's run (one per seed with --seeds)

    def ran(row: Row, seed: int | None) -> None:
        runs.append(dataclasses.replace(row, seed=seed))
        print(runs[-1].line(), flush=True)

    cluster, score_train, models = CLUSTER, True, args.models
    if args.defaults:
        dynamic = any(t.dynamic for t in inputs.config.features.tables.values())
        cluster, score_train = (ONE_PROCESS_PS if dynamic else ONE_PROCESS_MIRRORED), False
        labels = len(inputs.config.features.labels)
        models = [m for m in args.models if MODEL_REGISTRY[m].min_labels <= labels]
        for model in sorted(set(args.models) - set(models)):
            log(
                f"{model} left out: it needs {MODEL_REGISTRY[model].min_labels} labels, the "
                f"data has {labels}"
            )
        for model, reason in unfit_models(inputs, models).items():
            log(f"{model} left out: {reason}")
            models.remove(model)
    for seed in args.seeds or [None]:
        seeded, at = with_seed(inputs, seed), ("" if seed is None else f", seed {seed}")
        for model in models:
            if model != "lr":
                log(f"{model} in one process{at}")
                ran(reference_row(seeded, model, log, score_train), seed)
        for model in models:
            log(f"{model} through recsys-dist train and evaluate{at}")
            ran(
                zoo_row(
                    seeded,
                    model,
                    work,
                    "" if seed is None else f"-seed{seed}",
                    cluster,
                    score_train,
                ),
                seed,
            )
    if args.seeds:
        rows += [
            mean_row([r for r in runs if r.method == method])
            for method in dict.fromkeys(r.method for r in runs)
        ]
    else:
        rows += runs

    source = (
        f"synthetic data (`recsys-dist data synth --days {SYNTH_DAYS} --rows-per-day "
        f"{args.rows_per_day} --seed {SYNTH_SEED}`)"
        if args.data is None
        else f"`{args.data}`"
    )
    header = (
        ("Every method with its defaults alone (`--defaults`). " if args.defaults else "")
        + f"Data: {source}; config `{os.path.relpath(args.config, ROOT)}`; label "
        f"`{inputs.config.labels[0]}`; {described}.{oracle}"
    )
    text = table(rows, header)
    if args.seeds:
        text += (
            "\nHeld-out AUC per seed (`train.seed` and `input.seed`; logreg and "
            "LightGBM do not depend on them):\n\n" + paired_table(runs, args.seeds)
        )
    last = summary(rows, runs if args.seeds else ())
    if args.defaults:
        last = "\n".join([last, *targets(rows, runs)])
    print()
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n" + last + "\n")
    if args.json:
        pathlib.Path(args.json).write_text(json_document(rows, runs))
    print(last, flush=True)
    return 0


def json_document(rows: list[Row], runs: list[Row]) -> str:
    """What ``--json`` writes: the table's rows and every seed's run, each a :class:`Row`
    as a JSON object (``benchmarks/leave_one_out.py`` reads it back)."""
    document = {"rows": [dataclasses.asdict(r) for r in rows]}
    document["runs"] = [dataclasses.asdict(r) for r in runs]
    return json.dumps(document, indent=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.leave_one_out:
        sys.path.insert(0, str(ROOT))
        from benchmarks import leave_one_out

        return reporting_errors(lambda: leave_one_out.run(args))
    if args.work_dir:
        work = pathlib.Path(args.work_dir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return reporting_errors(lambda: run(args, work))
    with tempfile.TemporaryDirectory(prefix="peer_quality_") as tmp:
        return reporting_errors(lambda: run(args, pathlib.Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
