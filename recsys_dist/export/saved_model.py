"""Export a trained model as a SavedModel that stock TensorFlow serves.

``OUT_DIR`` holds ``saved_model.pb`` and ``variables/`` (one ``tf.Module``: every model
weight and ``serve``) and ``assets.extra/export.json`` (where it came from). The
``serving_default`` signature takes the raw Parquet columns the features read, runs the
training pipeline's in-graph transforms and the model, and returns ``{label:
probability}``. Each table is restored into one plain variable of a model built without a
distribution strategy, since a serving process has no parameter servers; so the export
needs nothing but standard TensorFlow ops, and TF Serving or a process that never
imports ``recsys_dist`` serves it. See docs/export.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import posixpath
import re
import shutil
from typing import Any

import tensorflow as tf

from recsys_dist import storage_io
from recsys_dist.checkpoint.restore import restore_model
from recsys_dist.checkpoint.signature import check_signature, saved_dynamic_shards
from recsys_dist.checkpoint.store import (
    CheckpointError,
    SavedCheckpoint,
    find_checkpoint,
    variable_bytes,
)
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.data.schema_check import split_read_dtype
from recsys_dist.errors import RecsysError
from recsys_dist.features.transforms import FeatureTransform
from recsys_dist.models.rows_in_use import keep_live_rows_only, rows_in_use
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import RankingModel, build_from_config

#: The signature a serving request names (TF Serving's default).
SIGNATURE_KEY = "serving_default"
#: The same with a ``<column>.valid`` input per scalar column, for requests with nulls.
NULLABLE_SIGNATURE_KEY = "serving_nullable"
#: Suffixes of the extra inputs: a list column's row lengths, a scalar column's validity.
LENGTHS_SUFFIX = "_lengths"
VALID_SUFFIX = "_valid"
#: The export's description, inside the SavedModel directory.
EXPORT_INFO = posixpath.join("assets.extra", "export.json")
#: ``source`` of the transform's error messages at serving time.
SERVING_SOURCE = "the serving request"

# What a signature input may be named: TensorFlow's node-name rule (tested: any other
# name fails the save, e.g. a leading "_", a space, ":" or a non-ASCII letter).
_INPUT_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$")


class ExportError(RecsysError):
    """The model cannot be exported to the requested place."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """A finished export.

    Attributes:
      out_dir: The SavedModel directory.
      step: Global step of the exported checkpoint.
      checkpoint: Directory of the exported checkpoint.
      inputs: Raw column name -> TensorFlow dtype name, the signature's inputs.
      outputs: Label names, the signature's outputs (probabilities).
    """

    out_dir: str
    step: int
    checkpoint: str
    inputs: dict[str, str]
    outputs: list[str]


# ---- finding the checkpoint -----------------------------------------------------------
# ---- building and restoring the model -------------------------------------------------
def _feature_names(config: ExperimentConfig) -> list[str]:
    return list(dict.fromkeys(n for group in config.inputs.values() for n in group))


def _input_columns(
    saved: SavedCheckpoint, config: ExperimentConfig
) -> tuple[FeatureTransform, dict[str, str]]:
    """The serving transform and its raw input columns (column -> dtype name)."""
    recorded = saved.state.get("feature_columns")
    if not isinstance(recorded, dict) or not recorded:
        raise CheckpointError(
            f"{saved.directory}: its state.json records no 'feature_columns' "
            "(the raw columns and dtypes the features read), so the serving "
            "signature cannot be built; export a checkpoint written by a "
            "newer recsys-dist"
        )
    try:
        transform = FeatureTransform(config.features, [], recorded, "fail", _feature_names(config))
    except ValueError as exc:
        raise CheckpointError(
            f"{saved.directory}: the features of {config.features.file} read "
            f"columns the checkpoint's training did not: {exc}"
        ) from None
    extra = sorted(set(recorded) - set(transform.columns))
    if extra:
        raise CheckpointError(
            f"{saved.directory}: the checkpoint's features read column(s) "
            f"{extra} that the features of {config.file} do not; export "
            "with the config the model was trained with"
        )
    inputs = {c: str(recorded[c]) for c in transform.columns}
    bad = [c for c in inputs if not _INPUT_NAME.match(c)]
    if bad:
        raise ExportError(
            f"column name(s) {bad} cannot name a SavedModel signature input "
            "(TensorFlow allows ASCII letters, digits and _ . - / \\ >, but "
            "none of _ - / \\ > first); rename the column"
        )
    return transform, inputs


def _input_specs(inputs: dict[str, str], nullable: bool) -> dict[str, tf.TensorSpec]:
    """The signature's inputs: ``[N]`` per scalar column, ``[N, L]`` padded values plus
    ``<column>_lengths`` ``[N]`` per list column, and with ``nullable`` a ``<column>_valid``
    ``[N]`` bool per scalar column (false: null).

    Raises:
      ExportError: an extra input's name is also the name of a column.
    """
    spec = {}
    for column, read_dtype in inputs.items():
        dtype, is_list = split_read_dtype(read_dtype)
        if is_list:
            spec[column] = tf.TensorSpec([None, None], tf.as_dtype(dtype), name=column)
            spec[column + LENGTHS_SUFFIX] = tf.TensorSpec(
                [None], tf.int64, name=column + LENGTHS_SUFFIX
            )
        else:
            spec[column] = tf.TensorSpec([None], tf.as_dtype(dtype), name=column)
            if nullable:
                spec[column + VALID_SUFFIX] = tf.TensorSpec(
                    [None], tf.bool, name=column + VALID_SUFFIX
                )
    clash = sorted((set(spec) - set(inputs)) & set(inputs))
    if clash:
        raise ExportError(
            f"column(s) {clash} clash with the extra serving inputs of other "
            f"columns ({LENGTHS_SUFFIX!r} for list columns, {VALID_SUFFIX!r} for "
            "validity); rename the column"
        )
    return spec


def build_serving_module(
    model: RankingModel, transform: FeatureTransform, inputs: dict[str, str], labels: list[str]
) -> tf.Module:
    """A ``tf.Module`` holding ``model``'s weights and the serving functions.

    ``serve(raw)`` takes the inputs of :func:`_input_specs` for every column of
    ``inputs`` and returns ``{label: float32 [N] probability}``; ``serve_nullable``
    also takes each scalar column's validity, so a null reads what it reads in training
    (a categorical's missing row, a numeric's ``fill_value``). Only the weights are
    tracked, not the Keras model object, so the SavedModel holds plain variables and
    functions and no Keras metadata.

    A dynamic table keeps only its live rows (:func:`keep_live_rows_only`): ``model``
    serves lookups afterwards but must not train.

    Args:
      model: The model, weights restored, built without a distribution strategy and with
        ``Placement(stock_lookups=True)`` (:func:`load_model`).
      transform: The feature transform (``on_bad_row: fail``).
      inputs: Column -> read dtype (``float32``, ``list<int64>``, ...).
      labels: Labels to return.
    """
    if not model.placement.stock_lookups:
        raise ExportError(
            "an export serves lookups in stock TensorFlow ops only: build its model with "
            "Placement(stock_lookups=True), as load_model does"
        )
    module = tf.Module(name="recsys_serving")
    # A dynamic table's rows: only those in use; its training state (last-seen days,
    # counters) is not served.
    keep_live_rows_only([t for tables in model.dynamic_tables.values() for t in tables])
    module.model_variables = [v for v in model.variables if rows_in_use(v) is None]
    # A dynamic table's id -> row index (a hash table, not a variable).
    module.id_tables = list(
        {
            id(shard.index): shard.index
            for tables in model.dynamic_tables.values()
            for table in tables
            for shard in table.shards
        }.values()
    )

    def predict(request: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        raw, present = {}, {}
        for column, read_dtype in inputs.items():
            if split_read_dtype(read_dtype)[1]:
                raw[column] = tf.RaggedTensor.from_tensor(
                    request[column], lengths=request[column + LENGTHS_SUFFIX]
                )
            else:
                raw[column] = request[column]
                if column + VALID_SUFFIX in request:
                    present[column] = request[column + VALID_SUFFIX]
        features = transform.features_only(
            raw, tf.constant(SERVING_SOURCE), tf.constant(0, tf.int64), present
        )
        logits = model(features, training=False)
        return {
            label: tf.sigmoid(tf.cast(logits[label], tf.float32), name=label) for label in labels
        }

    # autograph=False: the transform and the model are plain TensorFlow (see
    # Trainer._replica_step), and converting them only slows the trace.
    module.serve = tf.function(
        predict, input_signature=[_input_specs(inputs, False)], autograph=False
    )
    module.serve_nullable = tf.function(
        predict, input_signature=[_input_specs(inputs, True)], autograph=False
    )
    return module


def signature_functions(module: tf.Module) -> dict:
    """The SavedModel signatures of a serving module, by key."""
    return {
        SIGNATURE_KEY: module.serve.get_concrete_function(),
        NULLABLE_SIGNATURE_KEY: module.serve_nullable.get_concrete_function(),
    }


def load_model(config: ExperimentConfig, saved: SavedCheckpoint) -> RankingModel:
    """Builds the config's model without a strategy and restores ``saved`` into it.

    Every embedding table is one plain variable here, whatever its sharding in training,
    and a dynamic table looks up in stock ops only (``Placement(stock_lookups=True)``), so
    plain TensorFlow serves its export without the package's op library.

    Raises:
      CheckpointError: ``saved`` was written for another model, or lacks some weight.
    """
    if tf.distribute.has_strategy():
        raise ExportError(
            "export builds the model without a distribution strategy; do not "
            "call it inside strategy.scope()"
        )
    check_signature(saved, config, what=f"the export config {config.file}")
    placement = Placement(dynamic_shards=saved_dynamic_shards(saved) or 1, stock_lookups=True)
    model = build_from_config(config, placement)
    restore_model(model, saved, config.file)
    return model


# ---- writing -----------------------------------------------------------------------------
def _check_out_dir(out_dir: str) -> None:
    if storage_io.exists(out_dir):
        if not storage_io.isdir(out_dir):
            raise ExportError(
                f"{out_dir}: exists and is not a directory; choose another export directory"
            )
        if storage_io.listdir(out_dir):
            raise ExportError(
                f"{out_dir}: exists and is not empty; an export never overwrites "
                "one (choose a new directory, e.g. a new version number)"
            )
    if storage_io.is_remote(out_dir):  # a missing bucket fails here, before any work
        storage_io.check_writable(out_dir, "the export")


def _write_info(directory: str, info: dict[str, Any]) -> None:
    storage_io.write_text(
        storage_io.join(directory, EXPORT_INFO), json.dumps(info, indent=1) + "\n"
    )


def _save(module: tf.Module, out_dir: str, info: dict[str, Any]) -> None:
    """Saves ``module`` to ``out_dir``: locally via a temporary sibling renamed at the end;
    remotely via a local staging directory uploaded with ``export.json`` last.

    Its model was built by :func:`load_model`, so a dynamic table's lookups hold stock ops
    only and plain TensorFlow serves the SavedModel without the package's op library."""
    signatures = signature_functions(module)
    if storage_io.is_remote(out_dir):  # TensorFlow writes local files only; no rename there
        with storage_io.StagedDir(out_dir) as staged:
            with storage_io.space_named(
                staged.local, "write the export", lambda: variable_bytes(module), staged=True
            ):
                tf.saved_model.save(module, staged.local, signatures=signatures)
                _write_info(staged.local, info)
            staged.sync(last=[EXPORT_INFO])
        return
    local = out_dir[len("file://") :] if out_dir.startswith("file://") else out_dir
    local = local.rstrip("/") or "/"
    tmp = f"{local}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        with storage_io.space_named(local, "write the export", lambda: variable_bytes(module)):
            tf.saved_model.save(module, tmp, signatures=signatures)
            _write_info(tmp, info)
        if os.path.isdir(local):
            os.rmdir(local)  # empty (checked before); fails if something appeared meanwhile
        os.rename(tmp, local)
    except OSError as exc:
        raise ExportError(f"{out_dir}: cannot write the export: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_model(
    config: ExperimentConfig, model_dir: str, out_dir: str, checkpoint: str | None = None
) -> ExportResult:
    """Exports a checkpoint of ``model_dir`` as a servable SavedModel in ``out_dir``.

    Args:
      config: The experiment config the model was trained with (``load_config``).
      model_dir: The training run's directory.
      out_dir: The SavedModel directory to create (local, ``s3://`` or ``hdfs://``); must
        not exist or be empty.
      checkpoint: A checkpoint directory or prefix to export instead of the newest one.

    Returns:
      What was exported.

    A local ``out_dir`` is written to a temporary sibling renamed into place; an
    ``s3://`` or ``hdfs://`` one (which TensorFlow cannot write without tensorflow-io) to a
    local staging directory, uploaded with fsspec file by file with
    ``assets.extra/export.json`` last, so an export without it was cut short.

    Raises:
      CheckpointError: No complete checkpoint, or it was written for another feature or
        model config, or it lacks a weight of the model.
      ExportError: ``out_dir`` exists and is not empty, or cannot be written.

    Example:
      >>> from recsys_dist.config import load_config
      >>> result = export_model(load_config("model.yaml"), "runs/ctr", "exports/ctr/1")
      >>> result.inputs, result.outputs
      ({'I1': 'float32', 'C1': 'int64', 'tags': 'string'}, ['click'])
    """
    _check_out_dir(out_dir)
    saved = find_checkpoint(model_dir, checkpoint)
    check_signature(saved, config, what=f"the export config {config.file}")
    transform, inputs = _input_columns(saved, config)
    model = load_model(config, saved)
    labels = list(config.labels)
    info = {
        "format": "recsys_dist SavedModel export, version 1",
        "signature": SIGNATURE_KEY,
        "checkpoint": saved.directory,
        "step": saved.step,
        "model_dir": model_dir,
        "config": config.file,
        "features_config": config.features.file,
        "model": config.model.name,
        "labels": labels,
        "inputs": inputs,
        "outputs": {label: "float32 probability (sigmoid of the logit)" for label in labels},
        "tables": {name: [t.rows, t.dim] for name, t in sorted(config.features.tables.items())},
        "tensorflow_version": tf.__version__,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    _save(build_serving_module(model, transform, inputs, labels), out_dir, info)
    return ExportResult(
        out_dir=out_dir, step=saved.step, checkpoint=saved.directory, inputs=inputs, outputs=labels
    )
