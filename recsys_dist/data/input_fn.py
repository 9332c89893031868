"""The worker-side ``tf.data`` input function.

:func:`prepare_input` runs on the coordinator: it discovers the split's files, reads
their footers, checks the schema against the feature config and plans the units.
:meth:`InputPipeline.item_dataset` is what a worker runs for one work item (a row range
of one file, handed out by ``cluster/dispatch.py``): pure graph, it reads the rows with
the package's Parquet op, transforms every feature in-graph over the whole item (so
per-op overhead is paid per item, not per batch), shuffles its rows for training, then
rebatches. :meth:`InputPipeline.local_dataset` runs the same reader over every unit in
this process. No Python runs per row or per batch. Each element is a dict::

    {"features": {name: Tensor | {"ids", "weights"}},  # see features.transforms
     "labels": {name: float32 [B]},
     "valid": float32 [B],   # 0 for rows skipped under on_bad_row: skip
     "row": int64 [B],       # file_index << 32 | row in file: a row's identity in the plan
     "extra": {column: float32 [B]},   # extra_columns, e.g. oracle_logit for evaluation
     "keep": {column: Tensor [B]}}     # keep_columns as read (e.g. user id, slices)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Literal

import numpy as np
import tensorflow as tf

from recsys_dist import ops
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.config.sections import DataSplit, InputSpec
from recsys_dist.data import discovery, hashed_rows
from recsys_dist.data.parquet_meta import read_footers
from recsys_dist.data.schema_check import (
    ColumnNeed,
    check_schemas,
    required_columns,
    split_read_dtype,
)
from recsys_dist.data.shard_plan import ShardPlan, Unit, plan_shards, split_rows
from recsys_dist.errors import ConfigError, DataError
from recsys_dist.features.transforms import FeatureTransform

ROW_FILE_SHIFT = 32


def row_id(file_index: int, row: int) -> int:
    """The ``row`` value the input function emits for row ``row`` of file ``file_index``."""
    return (file_index << ROW_FILE_SHIFT) | row


#: Rows one scoring closure (evaluation, prediction) reads at most.
SCORING_ITEM_ROWS = 65536
#: Rows per forward pass when scoring, at least (the training batch when larger).
SCORING_BATCH_ROWS = 8192


@dataclasses.dataclass(frozen=True)
class InputPipeline:
    """A planned input split, ready to read.

    Attributes:
      plan: The split's files and units.
      transform: In-graph feature transform.
      spec: Input settings (batch size, parallelism, ...).
      extra_columns: Numeric columns passed through untransformed as float32.
      keep_columns: Columns passed through as read, any type (evaluation groups and
        slices).
      hash_share: ``(FROM, TO)``: read only the rows whose hash falls there (the split's
        ``hash_share``, ``data/hashed_rows.py``); None reads every row.
    """

    plan: ShardPlan
    transform: FeatureTransform
    spec: InputSpec
    extra_columns: tuple[str, ...] = ()
    keep_columns: tuple[str, ...] = ()
    hash_share: tuple[float, float] | None = None

    @functools.cached_property
    def _file_keys(self) -> tuple[int, ...]:
        """Each file's key for :attr:`hash_share` (``hashed_rows.file_keys``), once."""
        return hashed_rows.file_keys(self.plan.files)

    @functools.cached_property
    def total_rows(self) -> int:
        """Rows one pass returns: the plan's, or those :attr:`hash_share` keeps."""
        return sum(self.item_rows(u) for u in self.plan.units)

    def describe_rows(self) -> str:
        """``N rows``, or ``N of the files' M rows (hash_share [a, b])`` with a share."""
        if self.hash_share is None:
            return f"{self.total_rows:,} rows"
        low, high = self.hash_share
        return (
            f"{self.total_rows:,} of the files' {self.plan.total_rows:,} rows "
            f"(hash_share [{low:g}, {high:g}])"
        )

    def _with_kept(self, items: list[Unit]) -> tuple[Unit, ...]:
        """``items``, each with the rows :attr:`hash_share` keeps counted (when set)."""
        if self.hash_share is None:
            return tuple(items)
        return tuple(dataclasses.replace(u, kept=self.item_rows(u)) for u in items)

    def item_rows(self, item: Unit) -> int:
        """Rows a reader returns for ``item``: those :attr:`hash_share` keeps, when set."""
        if self.hash_share is None:
            return len(range(item.start, item.stop, item.stride))
        key = self._file_keys[item.file]
        return hashed_rows.kept_count(key, item.start, item.stop, item.stride, self.hash_share)

    def work_items(self, max_rows: int) -> tuple[Unit, ...]:
        """The plan's units cut into items of at most ``max_rows`` rows, in plan order.

        An item is what one scheduled closure reads; finished items are the data
        position a checkpoint records.
        """
        items = []
        for unit in self.plan.units:
            items.extend(
                Unit(unit.file, a, b) for a, b in split_rows(unit.start, unit.stop, max_rows)
            )
        return self._with_kept(items)

    def training_items(self, steps_per_call: int) -> tuple[Unit, ...]:
        """The items training hands out, one per closure: ``steps_per_call`` batches
        each at most (``data read`` reads the same items).

        A unit of R rows cut into m items gives item k its rows k, k + m, k + 2m, ...
        (a stride of m), so every item spans the whole unit: files are usually written
        in time or user order, and a batch drawn from contiguous rows would hold a few
        minutes or a few users. Scoring items stay contiguous (:meth:`scoring_items`)."""
        max_rows = steps_per_call * self.spec.batch_size
        items = []
        for unit in self.plan.units:
            pieces = -(-unit.rows // max_rows)
            items.extend(Unit(unit.file, unit.start + k, unit.stop, pieces) for k in range(pieces))
        return self._with_kept(items)

    def contiguous_training_items(self, steps_per_call: int) -> tuple[Unit, ...]:
        """The same number of items per unit as :meth:`training_items`, as contiguous
        ranges: how training cut its units before items were strided (a checkpoint's
        data position may count those)."""
        return self.work_items(steps_per_call * self.spec.batch_size)

    def scoring_items(self) -> tuple[Unit, ...]:
        """The items evaluation and prediction hand out, one per closure: at most
        :data:`SCORING_ITEM_ROWS` rows each (``data read`` of an eval split reads these)."""
        return self.work_items(SCORING_ITEM_ROWS)

    @property
    def scoring_batch_size(self) -> int:
        """Rows per forward pass when scoring: no gradients, so larger batches are cheap."""
        return max(SCORING_BATCH_ROWS, self.spec.batch_size)

    # Plain TensorFlow: AutoGraph must not convert it (see Trainer._replica_step).
    @tf.autograph.experimental.do_not_convert
    def item_dataset(
        self,
        file_index: tf.Tensor,
        start: tf.Tensor,
        stop: tf.Tensor,
        training: bool,
        batch_size: int | None = None,
        stride: tf.Tensor | int = 1,
    ) -> tf.data.Dataset:
        """The batches of the rows ``start, start + stride, ...`` below ``stop`` of file
        ``file_index`` (a :class:`Unit`), read in-graph on the worker that runs the
        closure building it (rows shuffled when training).

        ``batch_size`` overrides ``spec.batch_size`` (scoring uses larger batches)."""
        # The item is read and transformed by ops of the calling function itself, where
        # the executor runs the columns in parallel; a `map` over chunks of the item
        # would run its ops one by one (tf.data does so inside a map function).
        element = self._unit_reader(training)(file_index, start, stop, stride)
        return tf.data.Dataset.from_tensors(element).rebatch(batch_size or self.spec.batch_size)

    def _unit_reader(self, training: bool) -> Callable:
        """``read_unit(file_index, start, stop, stride=1) -> element`` for the rows
        ``start, start + stride, ...`` below ``stop``."""
        plan, spec = self.plan, self.spec
        transform = self.transform.with_fused_kernels()  # workers load the op library
        extra, keep = self.extra_columns, self.keep_columns
        read_dtypes = {
            c: split_read_dtype(transform.column_dtypes[c])
            for c in dict.fromkeys(list(transform.columns) + list(extra) + list(keep))
        }
        dtypes = {c: tf.as_dtype(d) for c, (d, _) in read_dtypes.items()}
        ragged = frozenset(c for c, (_, is_list) in read_dtypes.items() if is_list)
        shuffle = training and spec.shuffle
        files = plan.files
        share = self.hash_share
        keys = np.array(self._file_keys if share is not None else (), np.uint64)

        def read_unit(file_index, start, stop, stride=1):
            path = tf.gather(tf.constant(files), file_index)
            columns = ops.read_rows(path, start, stop, dtypes, ragged, stride)
            raw, present = {}, {}
            for name, column in columns.items():
                if name in ragged:
                    raw[name], present[name] = (
                        column.ragged(),
                        tf.RaggedTensor.from_row_splits(
                            column.valid, column.row_splits, validate=False
                        ),
                    )
                else:
                    raw[name], present[name] = column.values, column.valid
            step = tf.cast(stride, tf.int64)
            source = tf.strings.join(
                [
                    path,
                    " (rows ",
                    tf.strings.as_string(start),
                    "..",
                    tf.strings.as_string(stop),
                    tf.where(step > 1, " in steps of " + tf.strings.as_string(step), ""),
                    ")",
                ]
            )
            features, labels, valid = transform(raw, source, start, present, stride)
            file_rows = tf.range(start, stop, stride, dtype=tf.int64)
            rows = tf.bitwise.bitwise_or(
                tf.bitwise.left_shift(file_index, ROW_FILE_SHIFT), file_rows
            )
            element = {
                "features": features,
                "labels": labels,
                "valid": valid,
                "row": rows,
                "extra": {
                    c: tf.where(present[c], tf.cast(raw[c], tf.float32), float("nan"))
                    for c in extra
                },
                "keep": {c: raw[c] for c in keep},
            }
            order = None
            if share is not None:  # the rows the split's hash_share keeps
                key = tf.gather(tf.constant(keys), file_index)
                order = tf.where(hashed_rows.kept_in_graph(key, file_rows, share))[:, 0]
            if shuffle:
                order = tf.random.shuffle(
                    tf.range(tf.size(rows, out_type=tf.int64)) if order is None else order,
                    seed=spec.seed,
                )
            if order is not None:
                element = tf.nest.map_structure(lambda t: tf.gather(t, order), element)
            return element

        return read_unit

    def local_dataset(self, training: bool, epochs: int = 1) -> tf.data.Dataset:
        """Every unit of the plan read in this process, ``epochs`` times, through the
        reader a worker runs for an item (``validate --scan``, measurements, tests).

        Args:
          training: Shuffle units and rows (when ``spec.shuffle``), anew each epoch.
          epochs: Passes over the units.
        """
        plan, spec = self.plan, self.spec
        units = tuple(
            tf.constant(column, tf.int64)
            for column in (
                [u.file for u in plan.units],
                [u.start for u in plan.units],
                [u.stop for u in plan.units],
            )
        )
        ds = tf.data.Dataset.from_tensor_slices(units)
        if training and spec.shuffle:
            ds = ds.shuffle(len(plan.units), seed=spec.seed, reshuffle_each_iteration=True)
        if epochs > 1:
            ds = ds.repeat(epochs)
        ds = ds.map(
            self._unit_reader(training),
            num_parallel_calls=spec.read_parallelism,
            deterministic=not training,
        )
        return ds.rebatch(spec.batch_size).prefetch(spec.prefetch_batches)


def _split_files(
    config: ExperimentConfig, split: Literal["train", "eval", "validation"] | None
) -> list[str]:
    data = config.data
    if data is None:
        raise ConfigError(
            config.file, "data", "no data section; pass --data PATH or add data: {path: ...}"
        )
    chosen: DataSplit | None = getattr(data, split) if split else None
    if chosen is not None and _looks_like_root(data.path):
        return discovery.discover_split(data.path, chosen, data.partition_key)
    if chosen is None and split and not data.path_from_command_line:
        raise ConfigError(
            config.file,
            f"data.{split}",
            f"missing; set data.{split}.dates (FROM..TO) or data.{split}.glob, or pass --data PATH",
        )
    return discovery.discover_path(data.path, data.partition_key)


def _looks_like_root(path: str) -> bool:
    return not path.endswith(".parquet") and not any(c in path for c in "*?[")


def prepare_input(
    config: ExperimentConfig,
    split: Literal["train", "eval", "validation"] | None,
    num_workers: int,
    spec: InputSpec | None = None,
    extra_columns: tuple[str, ...] = (),
    optional_extra_columns: tuple[str, ...] = (),
    keep_columns: dict[str, str] | None = None,
) -> InputPipeline:
    """Discovers, checks and plans a split on the coordinator.

    Args:
      config: The experiment config.
      split: ``train``, ``eval`` or ``validation`` from ``config.data``; ``None`` reads
        all of the path.
      num_workers: Workers that will read the split (for the plan's description).
      spec: Overrides ``config.input``.
      extra_columns: Numeric columns to pass through, e.g. ``("oracle_logit",)``.
      optional_extra_columns: Passed through too when every file has them (the
        pipeline's ``extra_columns`` says which were found).
      keep_columns: Column -> what uses it (for messages), passed through as read:
        integer, string or boolean keys such as the user id of GAUC or slice columns.

    Raises:
      DataError: no files, bad files or rows under ``fail``, or a schema mismatch.
    """
    files = _split_files(config, split)
    on_bad_file = config.data.on_bad_file if config.data else "fail"
    on_bad_row = config.data.on_bad_row if config.data else "fail"
    metas, skipped = read_footers(files, on_bad_file)
    if not metas:
        raise DataError(
            "no readable Parquet file left after skipping bad files: "
            + "; ".join(f"{s.path}: {s.reason}" for s in skipped[:5])
        )
    feature_names = [n for group in config.inputs.values() for n in group]
    feature_names = list(dict.fromkeys(feature_names))
    extra_columns = tuple(extra_columns) + tuple(
        c
        for c in optional_extra_columns
        if c not in extra_columns and all(c in m.schema.names for m in metas)
    )
    needs = required_columns(config.features, config.labels)
    for column in extra_columns:
        if column not in needs:
            needs[column] = ColumnNeed(column, ("number",), ("the evaluation",))
    keep_columns = dict(keep_columns or {})
    for column, user in keep_columns.items():
        if column in needs:
            needs[column] = dataclasses.replace(needs[column], users=needs[column].users + (user,))
        else:
            needs[column] = ColumnNeed(column, ("key",), (user,))
    column_dtypes = check_schemas(metas, needs)
    transform = FeatureTransform(
        config.features, config.labels, column_dtypes, on_bad_row, feature_names
    )
    spec = spec or config.input
    label_columns = [config.features.column_of(config.features.labels[n]) for n in config.labels]
    plan = plan_shards(metas, num_workers, spec.max_unit_rows, on_bad_row, skipped, label_columns)
    chosen = getattr(config.data, split) if config.data is not None and split else None
    share = tuple(chosen.hash_share) if chosen is not None and chosen.hash_share else None
    return InputPipeline(
        plan, transform, spec, tuple(extra_columns), tuple(keep_columns), hash_share=share
    )
