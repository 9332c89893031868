"""``kind: numeric``: a float per row, fed to the dense tower or bucketized into an id.

Model input: float32 ``[N]``, or int64 ``[N]`` bucket rows for ``transform: bucketize``;
with ``missing_indicator`` also ``<name>.missing``, float32 ``[N]`` in {0, 1}. A null (or
a NaN under ``nan_means_missing``) reads ``fill_value``; a value still not finite is bad
data (``on_bad_row``).

Every numeric feature of a chunk is transformed at once, stacked ``[K, N]``: the fill,
the check and each ``transform`` run once over the features that use it (every
``bucketize`` in one batched search, one ``BucketizeRows`` op with the fused kernels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from recsys_dist.features.kinds.base import ColumnRead, FeatureKind, register_kind
from recsys_dist.features.kinds.context import FeatureSet, TransformContext
from recsys_dist.features.tables import TableSpec
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml


def missing_indicator_name(feature: str) -> str:
    """The dense input that flags a numeric feature's missing values."""
    return f"{feature}.missing"


@register_kind("numeric")
@dataclasses.dataclass(frozen=True)
class NumericFeature(FeatureKind):
    """A float value per row, fed to the dense tower or bucketised into an embedded id.

    Attributes:
      transform: ``none``, ``log1p`` (signed: ``sign(x) * log1p(|x|)``),
        ``standardize`` (``(x - mean) / std``) or ``bucketize`` (into ``table``).
      mean, std: Required for ``standardize``.
      boundaries: Strictly increasing bucket edges, required for ``bucketize``.
      table: Embedding table for ``bucketize`` (rows >= len(boundaries) + 1).
      nan_means_missing: Treat NaN as a missing value, like a null. When false, NaN
        is bad data. Infinity is always bad data.
      fill_value: Value used for a missing input (a null, or NaN under
        ``nan_means_missing``), before the transform.
      missing_indicator: Also feed the dense tower a 0/1 input ``<name>.missing``,
        1 where the value was missing (not for ``bucketize``: give missing values a
        bucket of their own with a ``fill_value`` outside the boundaries).
    """

    name: str
    kind: Literal["numeric"] = "numeric"
    column: str | None = None
    transform: Literal["none", "log1p", "standardize", "bucketize"] = "none"
    mean: float | None = None
    std: float | None = field(default=None, metadata={"min": 1e-12})
    boundaries: list[float] | None = field(default=None, metadata={"min_items": 1})
    table: str | None = None
    nan_means_missing: bool = False
    fill_value: float = 0.0
    missing_indicator: bool = False

    # ---- the config -----------------------------------------------------------------
    @property
    def table_name(self) -> str | None:
        """The bucket ids' table under ``bucketize``; None for a dense input."""
        return self.table if self.transform == "bucketize" else None

    def check_dynamic_table(self, doc: LocatedYaml, path: str, table: TableSpec) -> None:
        raise doc.error(
            path + ".table",
            f"table {table.name!r} is kind: dynamic, but "
            f"numeric feature values are floats (bucket ids); give the buckets "
            f"a hashed table with rows >= len(boundaries) + 1",
        )

    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        if self.transform == "standardize" and (self.mean is None or self.std is None):
            raise doc.error(path, "transform 'standardize' needs both 'mean' and 'std'")
        if self.transform == "bucketize":
            self._check_bucketize(doc, path)
        else:
            for key in ("boundaries", "table"):
                if getattr(self, key) is not None:
                    raise doc.error(
                        f"{path}.{key}",
                        f"only applies to transform 'bucketize', not {self.transform!r}",
                    )
        if self.transform != "standardize":
            for key in ("mean", "std"):
                if getattr(self, key) is not None:
                    raise doc.error(
                        f"{path}.{key}",
                        f"only applies to transform 'standardize', not {self.transform!r}",
                    )
        return None

    def _check_bucketize(self, doc: LocatedYaml, path: str) -> None:
        if not self.boundaries:
            raise doc.error(path, "transform 'bucketize' needs 'boundaries'")
        if self.table is None:
            raise doc.error(path, "transform 'bucketize' needs a 'table' for the bucket ids")
        if self.missing_indicator:
            raise doc.error(
                path + ".missing_indicator",
                "does not apply to transform "
                "'bucketize'; give missing values a bucket of their own with a "
                "fill_value outside the boundaries, e.g. below the first",
            )
        if any(a >= b for a, b in zip(self.boundaries, self.boundaries[1:])):
            raise doc.error(
                path + ".boundaries", f"got {self.boundaries}; expected strictly increasing numbers"
            )

    def id_rows(self, config: FeatureSet) -> int:
        """The buckets: ``len(boundaries) + 1``."""
        return len(self.boundaries or []) + 1

    def table_rows_needed(self, config: FeatureSet) -> tuple[int, str]:
        return self.id_rows(config), "len(boundaries) + 1"

    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        return [ColumnRead(config.column_of(self), "number", f"feature {self.name!r}")]

    # ---- the transform --------------------------------------------------------------
    def outputs(self) -> tuple[str, ...]:
        if self.missing_indicator:
            return (self.name, missing_indicator_name(self.name))
        return (self.name,)

    @classmethod
    def transform_all(
        cls, features: list[NumericFeature], context: TransformContext
    ) -> dict[str, tf.Tensor]:
        """Every numeric feature at once, stacked ``[K, N]``: nulls (and NaN under
        ``nan_means_missing``) read ``fill_value``; a value still not finite is bad (it
        reads ``fill_value`` too); then each feature's transform; ``<name>.missing``
        where asked. Appends one ``([K, N] bad, K messages)`` check."""
        columns = [context.config.column_of(f) for f in features]
        x = tf.stack([tf.cast(context.raw[c], tf.float32) for c in columns])
        if any(c in context.present for c in columns):
            missing = tf.logical_not(context.stacked_presence(columns, x))
        else:
            missing = tf.zeros(tf.shape(x), tf.bool)
        nan_missing = np.array([[f.nan_means_missing] for f in features])
        if nan_missing.any():
            missing = tf.logical_or(missing, tf.logical_and(tf.math.is_nan(x), nan_missing))
        fill = tf.constant([[f.fill_value] for f in features], tf.float32)
        x = tf.where(missing, fill, x)
        bad = tf.logical_not(tf.math.is_finite(x))
        x = tf.where(bad, fill, x)
        context.checks.append(
            (
                bad,
                [
                    f"numeric column {column!r} (feature {f.name!r}) has "
                    + (
                        "an infinite value"
                        if f.nan_means_missing
                        else "a NaN or infinite value "
                        "(set nan_means_missing: true if NaN means missing)"
                    )
                    for f, column in zip(features, columns)
                ],
            )
        )
        out = _transformed(x, features, context.ops)
        indicated = [k for k, f in enumerate(features) if f.missing_indicator]
        if indicated:
            flags = tf.unstack(
                tf.cast(tf.gather(missing, indicated), tf.float32), num=len(indicated)
            )
            out.update(
                (missing_indicator_name(features[k].name), flag)
                for k, flag in zip(indicated, flags)
            )
        return out


def _transformed(x: tf.Tensor, features: list[NumericFeature], ops: Any) -> dict[str, tf.Tensor]:
    """Each feature's ``transform`` of its row of ``x`` ``[K, N]``, one per transform."""
    values = {}
    for name in dict.fromkeys(f.transform for f in features):
        picked = [k for k, f in enumerate(features) if f.transform == name]
        rows = x if len(picked) == len(features) else tf.gather(x, picked)
        if ops is not None and name == "bucketize":
            part = ops.bucketize_rows(rows, _bucket_edges([features[k] for k in picked]))
        else:
            part = _NUMERIC_TRANSFORMS[name](rows, [features[k] for k in picked])
        values.update(zip(picked, tf.unstack(part, num=len(picked))))
    return {f.name: values[k] for k, f in enumerate(features)}


def _log1p(x: tf.Tensor, features: list[NumericFeature]) -> tf.Tensor:
    return tf.sign(x) * tf.math.log1p(tf.abs(x))


def _standardize(x: tf.Tensor, features: list[NumericFeature]) -> tf.Tensor:
    mean = tf.constant([[f.mean] for f in features], tf.float32)
    std = tf.constant([[f.std] for f in features], tf.float32)
    return (x - mean) / std


def _bucket_edges(features: list[NumericFeature]) -> np.ndarray:
    """``[K, W]`` float32 boundaries of each feature, padded with +inf."""
    width = max(len(f.boundaries or []) for f in features)
    edges = np.full([len(features), width], np.inf, np.float32)
    for k, f in enumerate(features):
        edges[k, : len(f.boundaries or [])] = f.boundaries
    return edges


def _bucketize(x: tf.Tensor, features: list[NumericFeature]) -> tf.Tensor:
    """``Bucketize`` of each row by its feature's boundaries: the number of boundaries
    <= x (boundaries padded with +inf, which no finite x reaches), as int64."""
    return tf.searchsorted(tf.constant(_bucket_edges(features)), x, side="right", out_type=tf.int64)


#: Each numeric ``transform`` of the feature config, applied to its features' rows stacked.
_NUMERIC_TRANSFORMS = {
    "none": lambda x, features: x,
    "log1p": _log1p,
    "standardize": _standardize,
    "bucketize": _bucketize,
}
