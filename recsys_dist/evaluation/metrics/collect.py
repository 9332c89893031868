"""Collecting a split's model outputs chunk by chunk: :class:`EvalAccumulator` builds an
:class:`EvalData`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from recsys_dist.evaluation.metrics.checks import (
    as_1d,
    check_labels,
    check_length,
    check_scores,
    check_weights,
)


@dataclass
class EvalData:
    """Evaluation outputs of a whole split, one entry per row.

    Attributes:
      labels: Label name -> int8 0/1.
      logits: Label name -> float32 logits of the model.
      weights: float32 row weights.
      row_ids: int64 row ids.
      groups: Optional int64 group (user) ids, for GAUC.
      slices: Slice column -> values; string columns hold int32 codes into ``slice_vocab``.
      slice_vocab: Slice column -> names of its codes (string columns only).
      oracle_logits: Label name -> float32 oracle logits (e.g. the true logits of synthetic
        data).
    """

    labels: dict[str, np.ndarray]
    logits: dict[str, np.ndarray]
    weights: np.ndarray
    row_ids: np.ndarray
    groups: np.ndarray | None = None
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    slice_vocab: dict[str, list[str]] = field(default_factory=dict)
    oracle_logits: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.row_ids)


class EvalAccumulator:
    """Collects evaluation outputs chunk by chunk in compact typed buffers.

    Each :meth:`add` converts its chunk to compact dtypes and appends it to a list of chunks;
    :meth:`finish` concatenates each column once (keeping the result, so the peak is twice
    the stored size for that moment only). Memory per row, for ``L`` labels:

    - labels int8 (1 byte each) and logits float32 (4 bytes each): ``5 * L``;
    - weights float32: 4; row ids int64: 8;
    - groups int64: 8 (only when given);
    - oracle logits float32: 4 per label that has them;
    - slice columns: 4 per string column (int32 codes plus one vocabulary entry per
      distinct value), the values' item size for a numeric column.

    So ``12 + 5 * L`` bytes per row, e.g. 22 bytes for two labels; with groups, two oracle
    labels and two string slice columns, 46 bytes (10M rows: 460 MB).

    The first chunk fixes the schema (label names, whether groups are present, slice
    columns, oracle labels); later chunks must match it.
    """

    def __init__(self) -> None:
        self._columns: dict[tuple[str, str], list[np.ndarray]] = {}
        self._schema: tuple | None = None
        self._vocab: dict[str, dict[str, int]] = {}
        self._rows = 0

    @property
    def rows(self) -> int:
        """Rows added so far."""
        return self._rows

    @property
    def bytes_used(self) -> int:
        """Bytes held by the stored arrays (vocabularies not counted)."""
        return sum(chunk.nbytes for chunks in self._columns.values() for chunk in chunks)

    def add(
        self,
        labels: Mapping[str, Any],
        logits: Mapping[str, Any],
        weights: Any,
        row_ids: Any,
        groups: Any = None,
        slices: Mapping[str, Any] | None = None,
        oracle_logits: Mapping[str, Any] | None = None,
    ) -> None:
        """Appends one chunk of rows.

        Args:
          labels: Label name -> 0/1 per row.
          logits: Label name -> logit per row; the same names as ``labels``.
          weights: Weight per row (>= 0); None means 1.
          row_ids: Integer row id per row.
          groups: Optional integer group (user) id per row.
          slices: Optional slice column -> value per row (strings or numbers).
          oracle_logits: Optional label name -> oracle logit per row, for some of the labels.

        Raises:
          ValueError: When the chunk is malformed or does not match the first chunk's schema.
        """
        slices = dict(slices or {})
        oracle_logits = dict(oracle_logits or {})
        schema = self._check_schema(labels, logits, groups, slices, oracle_logits)
        ids = as_1d(row_ids, "row_ids")
        if ids.dtype.kind not in "iu":
            raise ValueError(f"row_ids must be integers, got dtype {ids.dtype}")
        rows = len(ids)
        chunk: dict[tuple[str, str], np.ndarray] = {("row_ids", ""): ids.astype(np.int64)}
        for name in labels:
            where = f"labels[{name!r}]"
            values = as_1d(labels[name], where)
            check_length(values, where, rows, "row_ids")
            chunk["labels", name] = (
                check_labels(values, where).astype(np.int8) if rows else np.empty(0, np.int8)
            )
            chunk["logits", name] = self._logits(logits[name], f"logits[{name!r}]", rows)
        for name in oracle_logits:
            chunk["oracle", name] = self._logits(
                oracle_logits[name], f"oracle_logits[{name!r}]", rows
            )
        chunk["weights", ""] = (
            np.ones(rows, np.float32)
            if weights is None
            else check_weights(weights, rows, "row_ids").astype(np.float32)
        )
        if groups is not None:
            group_ids = as_1d(groups, "groups")
            check_length(group_ids, "groups", rows, "row_ids")
            if group_ids.dtype.kind not in "iu":
                raise ValueError(f"groups must be integer ids, got dtype {group_ids.dtype}")
            chunk["groups", ""] = group_ids.astype(np.int64)
        for name, values in slices.items():
            chunk["slices", name] = self._slice_chunk(name, values, rows)
        self._schema = schema
        for key, values in chunk.items():
            self._columns.setdefault(key, []).append(values)
        self._rows += rows

    def _check_schema(
        self,
        labels: Mapping[str, Any],
        logits: Mapping[str, Any],
        groups: Any,
        slices: Mapping[str, Any],
        oracle_logits: Mapping[str, Any],
    ) -> tuple:
        """The chunk's schema, checked against itself and against the first chunk's."""
        if not labels:
            raise ValueError("labels is empty; expected at least one label name -> array")
        if set(logits) != set(labels):
            raise ValueError(
                f"logits must have the same names as labels: labels "
                f"{sorted(labels)}, logits {sorted(logits)}"
            )
        unknown = set(oracle_logits) - set(labels)
        if unknown:
            raise ValueError(
                f"oracle_logits has names {sorted(unknown)} that are not labels {sorted(labels)}"
            )
        schema = (
            tuple(sorted(labels)),
            groups is not None,
            tuple(sorted(slices)),
            tuple(sorted(oracle_logits)),
        )
        if self._schema is not None and schema != self._schema:
            raise ValueError(
                f"chunk does not match the first chunk: expected (labels, has "
                f"groups, slices, oracle labels) = {self._schema}, got {schema}"
            )
        return schema

    @staticmethod
    def _logits(values: Any, name: str, rows: int) -> np.ndarray:
        array = as_1d(values, name)
        return check_scores(array, name, rows, "row_ids").astype(np.float32)

    def _slice_chunk(self, name: str, values: Any, rows: int) -> np.ndarray:
        where = f"slices[{name!r}]"
        array = as_1d(values, where)
        check_length(array, where, rows, "row_ids")
        is_text = array.dtype.kind in "OUS"
        if not is_text and array.dtype.kind not in "biuf":
            raise ValueError(f"{where} must hold strings or numbers, got dtype {array.dtype}")
        was_text = name in self._vocab
        if self._rows and was_text != is_text:
            raise ValueError(f"{where} changed between strings and numbers across chunks")
        if not is_text:
            return array.copy()
        vocab = self._vocab.setdefault(name, {})
        distinct, inverse = np.unique(array.astype(str), return_inverse=True)
        codes = np.array(
            [vocab.setdefault(value, len(vocab)) for value in distinct.tolist()], np.int32
        )
        return codes[inverse.reshape(-1)] if rows else np.empty(0, np.int32)

    def finish(self) -> EvalData:
        """Concatenates the chunks into one :class:`EvalData` (the accumulator stays usable)."""
        for key, chunks in self._columns.items():
            if len(chunks) > 1:
                self._columns[key] = [np.concatenate(chunks)]
        column = {key: chunks[0] for key, chunks in self._columns.items()}

        def named(kind: str) -> dict[str, np.ndarray]:
            return {name: values for (k, name), values in column.items() if k == kind}

        return EvalData(
            labels=named("labels"),
            logits=named("logits"),
            weights=column.get(("weights", ""), np.empty(0, np.float32)),
            row_ids=column.get(("row_ids", ""), np.empty(0, np.int64)),
            groups=column.get(("groups", "")),
            slices=named("slices"),
            slice_vocab={name: list(vocab) for name, vocab in self._vocab.items()},
            oracle_logits=named("oracle"),
        )
