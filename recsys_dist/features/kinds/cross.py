"""``kind: cross``: a hashed cross of two or more categorical features.

Model input: int64 ``[N]`` table rows. The inputs' hashes (an integer input's
``hash_int64``, shared with the categorical features; a string input's Fingerprint64)
are combined in order (:func:`recsys_dist.hashing.combine`) and bucketed into
``rows - 1`` rows; a row with a missing input reads the last row (the missing row). A
cross reads no column of its own: its inputs' columns are read for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from recsys_dist import hashing
from recsys_dist.features.kinds.base import ColumnRead, FeatureKind, register_kind
from recsys_dist.features.kinds.categorical import CategoricalFeature
from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.tables import TableSpec
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml
from recsys_dist.yaml_schema import did_you_mean


@register_kind("cross")
@dataclasses.dataclass(frozen=True)
class CrossFeature(FeatureKind):
    """A hashed cross of two or more categorical features.

    Attributes:
      inputs: Names of categorical features to cross (at least two).
      table: Embedding table the crossed ids index.
      hash_buckets: Hash into this many rows; defaults to the table's ``rows``.
    """

    name: str
    table: str
    inputs: list[str] = field(metadata={"min_items": 2})
    kind: Literal["cross"] = "cross"
    hash_buckets: int | None = field(default=None, metadata={"min": 1})

    # ---- the config -----------------------------------------------------------------
    def depends_on(self) -> tuple[str, ...]:
        return tuple(self.inputs)

    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        for i, name in enumerate(self.inputs):
            if name not in features:
                raise doc.error(
                    f"{path}.inputs[{i}]",
                    f"unknown feature {name!r}." + did_you_mean(name, features),
                )
            if not isinstance(features[name], CategoricalFeature):
                raise doc.error(
                    f"{path}.inputs[{i}]",
                    f"feature {name!r} is "
                    f"{features[name].kind}; a cross takes categorical features",
                )
        if len(set(self.inputs)) != len(self.inputs):
            raise doc.error(path + ".inputs", "lists the same feature twice")
        return None

    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        return []

    # ---- the transform --------------------------------------------------------------
    def _input_columns(self, config: FeatureSet) -> list[tuple[str, bool]]:
        """``(column, holds strings)`` of each input, in order."""
        return [
            (config.column_of(config.features[name]), config.features[name].dtype == "string")
            for name in self.inputs
        ]

    def int_hash_columns(self, config: FeatureSet) -> list[str]:
        return [column for column, strings in self._input_columns(config) if not strings]

    @classmethod
    def transform_all(
        cls, features: list[CrossFeature], context: TransformContext
    ) -> dict[str, tf.Tensor]:
        return {feature.name: feature._ids(context) for feature in features}

    def _ids(self, context: TransformContext) -> tf.Tensor:
        hashed, present = None, None
        for column, strings in self._input_columns(context.config):
            h = hashing.hash_string(context.raw[column]) if strings else context.int_hashes[column]
            hashed = h if hashed is None else hashing.combine(hashed, h)
            if column in context.present:
                present = (
                    context.present[column]
                    if present is None
                    else tf.logical_and(present, context.present[column])
                )
        missing_row = context.config.rows_of(self) - 1
        ids = hashing.to_bucket(hashed, max(missing_row, 1))
        return (
            ids if present is None else tf.where(present, ids, tf.constant(missing_row, tf.int64))
        )

    # ---- validate --scan ------------------------------------------------------------
    def scan_columns(self, config: FeatureSet) -> list[str]:
        return [column for column, _ in self._input_columns(config)]

    def scan_ids(self, scan: IdScan) -> tuple[np.ndarray, np.ndarray]:
        """An id is the tuple of its input values (told apart by their combined hash); a
        row with a missing input has none."""
        hashed, ok = None, None
        for column in self.scan_columns(scan.config):
            values, present = scan.column(column)
            h = (
                hashing.hash_string(values)
                if values.dtype == tf.string
                else hashing.hash_int64(values)
            )
            hashed = h if hashed is None else hashing.combine(hashed, h)
            ok = present if ok is None else ok & present
        keys = tf.bitcast(hashed, tf.int64).numpy()
        return keys[ok], scan.rows(self.name)[ok]
