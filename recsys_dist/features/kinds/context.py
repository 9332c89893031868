"""What a feature kind is given: the feature config, one chunk's columns for its transform,
one record batch for ``validate --scan``.

:class:`TransformContext` is built by
:class:`~recsys_dist.features.transforms.FeatureTransform` for each chunk of N rows and
passed to every kind's ``transform_all``; :class:`IdScan` is what
:mod:`recsys_dist.data.collisions` gives a kind's ``scan_ids``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from recsys_dist import hashing
from recsys_dist.lazy import tensorflow as tf


class FeatureSet(Protocol):
    """What a kind sees of the feature config
    (:class:`~recsys_dist.features.config.FeatureConfig`)."""

    @property
    def tables(self) -> Mapping[str, Any]: ...

    @property
    def features(self) -> Mapping[str, Any]: ...

    @property
    def vocabularies(self) -> Mapping[str, list]: ...

    def column_of(self, feature_or_label: Any) -> str: ...

    def rows_of(self, feature: Any) -> int: ...

    def sequence_groups(self, names: list[str] | None = None) -> list: ...


class IntHashes:
    """``hash_int64`` of integer columns, computed once for every feature that reads one,
    stacked ``[K, N]`` (or, with the fused kernels, the hashes ``HashIntIds`` gave, see
    :meth:`provide`).

    Args:
      raw: Column -> ``[N]`` tensor of the chunk.
      columns: The integer columns whose hashes some feature reads, in a fixed order.
    """

    def __init__(self, raw: dict, columns: list[str]):
        self._columns = list(dict.fromkeys(columns))
        self.raw = raw
        self._hashes: tf.Tensor | None = None
        self._provided: dict[str, tf.Tensor] = {}

    def provide(self, columns: list[str], hashes: tf.Tensor) -> None:
        """Takes ``[len(columns), N]`` hashes computed elsewhere (a fused kernel)."""
        for k, column in enumerate(columns):
            self._provided.setdefault(column, hashes[k])

    def _all(self) -> tf.Tensor:
        if self._hashes is None:
            self._hashes = hashing.hash_int64(
                tf.stack([tf.cast(self.raw[c], tf.int64) for c in self._columns])
            )
        return self._hashes

    def stacked(self, columns: list[str]) -> tf.Tensor:
        """``[len(columns), N]`` uint64 hashes of ``columns``, in that order."""
        if columns == self._columns:
            return self._all()
        return tf.gather(self._all(), [self._columns.index(c) for c in columns])

    def __getitem__(self, column: str) -> tf.Tensor:
        if column in self._provided:
            return self._provided[column]
        return self._all()[self._columns.index(column)]


@dataclasses.dataclass
class TransformContext:
    """One chunk of N rows, as every kind's ``transform_all`` gets it.

    Attributes:
      config: The feature config.
      raw: Column -> ``[N]`` tensor, or ``[N, None]`` ragged tensor for a list column, as
        read (nulls as 0 / "").
      present: Column -> validity of ``raw`` (``[N]`` bool, or ragged bool per list
        element); a column not in it has no nulls.
      checks: Row checks to append to: ``(bad [N], message)`` or
        ``(bad [K, N], K messages)``; a bad row fails or is skipped (``on_bad_row``).
      int_hashes: The integer hashes every kind shares (a cross reuses its inputs').
      prepared: Feature name -> what its kind's ``prepare`` built (vocabularies).
      ops: :mod:`recsys_dist.ops` when the fused kernels apply (the workers' input
        pipeline), None for the stock TensorFlow ops (serving). Same values either way.
    """

    config: FeatureSet
    raw: dict
    present: dict
    checks: list
    int_hashes: IntHashes
    prepared: dict[str, Any]
    ops: Any = None

    def stacked_presence(self, columns: list[str], like: tf.Tensor) -> tf.Tensor:
        """``[K, N]`` validity of ``columns`` (true where a column has no validity);
        ``like`` is any ``[K, N]`` tensor of the chunk."""
        everywhere = None
        rows = []
        for column in columns:
            if column in self.present:
                rows.append(self.present[column])
            else:
                if everywhere is None:
                    everywhere = tf.ones(tf.shape(like)[1:], tf.bool)
                rows.append(everywhere)
        return tf.stack(rows)


class IdScan(Protocol):
    """One record batch of ``validate --scan`` (:mod:`recsys_dist.data.collisions`), as
    a kind's ``scan_ids`` reads it."""

    @property
    def config(self) -> FeatureSet: ...

    def column(self, column: str) -> tuple[tf.Tensor, Any]:
        """A scalar column as the input function reads it (nulls as 0 / "") and its
        validity (a numpy bool array)."""

    def tokens(
        self,
        column: str,
        separator: str,
        max_length: int,
        newest_last: bool = False,
        weight_separator: str | None = None,
    ) -> tf.Tensor:
        """The ids of a list (or delimited string) column a multi-valued feature looks
        up: nulls and empty tokens dropped, each row's first ``max_length`` kept (its
        last ones with ``newest_last``), the ``:weight`` part cut off with
        ``weight_separator``."""

    def rows(self, name: str) -> Any:
        """The table rows (numpy ``[N]``) the transform gives a single-valued feature."""

    def prepared(self, name: str) -> Any:
        """What the feature's ``prepare`` built (its vocabulary), or None."""

    def identity(self, values: tf.Tensor) -> Any:
        """int64 numpy keys telling ids apart: the value itself, or a string's
        fingerprint."""
