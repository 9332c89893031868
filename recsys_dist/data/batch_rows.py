"""How many distinct table rows a training batch looks up, measured on real batches.

An embedding layer de-duplicates a step's ids before it gathers them, so what a step
reads from the parameter servers (and writes back as gradients) grows with the distinct
rows of a batch, not with its ids: on skewed data far fewer than ids spread evenly over
the table would give. The capacity planner (``recsys_dist/cluster/capacity.py``) takes
these counts when the data is there. Batches are read in this process through the same
input function the workers run.
"""

from __future__ import annotations

import numpy as np

from recsys_dist.features.config import FeatureConfig


def distinct_rows_per_batch(
    pipeline, features: FeatureConfig, batches: int
) -> tuple[dict[str, float], int]:
    """Mean distinct rows per batch of each table of ``features``, over the first
    ``batches`` training batches of ``pipeline`` (an
    :class:`~recsys_dist.data.input_fn.InputPipeline`); the ids of every feature of a
    table count together, padding never. Returns the means and how many batches were
    read (fewer when the data ends first)."""
    dataset = pipeline.local_dataset(training=True)
    counts: dict[str, list[int]] = {}
    seen = 0
    for batch in dataset.take(batches):
        seen += 1
        for table, ids in _ids_by_table(features, batch["features"]).items():
            counts.setdefault(table, []).append(len(np.unique(ids)))
    return {table: float(np.mean(c)) for table, c in counts.items()}, seen


def _ids_by_table(features: FeatureConfig, batch: dict) -> dict[str, np.ndarray]:
    """The table rows one batch looks up, per table (padding of multi-valued inputs out)."""
    found: dict[str, list[np.ndarray]] = {}
    for name, value in batch.items():
        if name not in features.features:
            continue
        table = features.features[name].table_name
        if table is None:
            continue
        if isinstance(value, dict):
            ids = value["ids"].numpy()[value["weights"].numpy() != 0]
        else:
            ids = value.numpy().reshape(-1)
        found.setdefault(table, []).append(ids)
    return {table: np.concatenate(parts) for table, parts in found.items()}
