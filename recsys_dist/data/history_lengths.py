"""How long the behaviour histories of a split are (``validate --scan``).

For every ``sequence`` feature whose main history a model reads, the stored list lengths
over the planned rows of a split: their median, mean, 90th percentile and largest, how
many rows hold an empty (or null) history, and how many hold more than ``max_length`` ids,
of which only the newest ``max_length`` are read. A history that is mostly empty, or mostly
cut, is worth knowing before training on it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recsys_dist.data.collisions import planned_batches


@dataclasses.dataclass(frozen=True)
class HistoryLengths:
    """The stored lengths of one sequence feature over a split.

    Attributes:
      feature: The sequence feature.
      max_length: Its ``max_length``.
      lengths: Every planned row's stored list length (0 for a null list).
    """

    feature: str
    max_length: int
    lengths: np.ndarray

    def line(self) -> str:
        """The report line (``history  <feature>: ...``)."""
        n = len(self.lengths)
        if n == 0:
            return f"history  {self.feature}: no rows"
        empty = np.count_nonzero(self.lengths == 0) / n
        cut = np.count_nonzero(self.lengths > self.max_length) / n
        return (
            f"history  {self.feature}: length median {np.median(self.lengths):.0f}, mean "
            f"{self.lengths.mean():.1f}, p90 {np.percentile(self.lengths, 90):.0f}, max "
            f"{self.lengths.max():,} over {n:,} rows; {empty:.1%} empty, {cut:.1%} longer "
            f"than max_length {self.max_length} (the newest {self.max_length} are read)"
        )


def _lengths(array: pa.Array, separator: str) -> np.ndarray:
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        text = array.fill_null("")
        counts = pc.list_value_length(pc.split_pattern(text, separator))
        counts = np.asarray(counts.to_numpy(zero_copy_only=False), np.int64)
        return np.where(np.asarray(pc.equal(text, "").to_numpy(zero_copy_only=False)), 0, counts)
    return np.asarray(
        pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False), np.int64
    )


def history_lengths(pipeline, batch_rows: int = 65536) -> list[HistoryLengths]:
    """The lengths of every main sequence of ``pipeline``'s features over its planned rows.

    Args:
      pipeline: A planned split (:func:`recsys_dist.data.input_fn.prepare_input`).
      batch_rows: Rows read at once.
    """
    config = pipeline.transform.config
    groups = config.sequence_groups(pipeline.transform.feature_names)
    if not groups:
        return []
    feats = [config.features[g.main] for g in groups]
    columns = list(dict.fromkeys(config.column_of(f) for f in feats))
    found: dict[str, list[np.ndarray]] = {f.name: [] for f in feats}
    for batch in planned_batches(pipeline.plan, columns, batch_rows):
        for feat in feats:
            found[feat.name].append(_lengths(batch.column(config.column_of(feat)), feat.separator))
    return [
        HistoryLengths(
            f.name,
            f.max_length,
            np.concatenate(found[f.name]) if found[f.name] else np.zeros(0, np.int64),
        )
        for f in feats
    ]
