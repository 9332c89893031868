"""How far above chance a held-out AUC must be to say a run learned."""

from __future__ import annotations

import math


def chance_auc_bound(rows: int, ctr: float, z: float = 3.0) -> float:
    """The AUC a model that learned nothing exceeds with probability about 0.1% (``z``
    standard errors above 0.5) on ``rows`` held-out rows with a positive rate ``ctr``:
    under no signal, the Mann-Whitney AUC has standard error
    ``sqrt((n1 + n0 + 1) / (12 n1 n0))``."""
    positives = round(rows * ctr)
    negatives = rows - positives
    return 0.5 + z * math.sqrt((positives + negatives + 1) / (12 * positives * negatives))


def learned(result: dict, label: str = "click") -> tuple[bool, str]:
    """Whether ``train_result.json``'s held-out AUC of ``label`` is above chance, and a
    line saying so for the assertion."""
    rows, figures = result["eval"]["rows"], result["eval"]["labels"][label]
    bound = chance_auc_bound(rows, figures["ctr"])
    return figures["auc"] > bound, f"AUC {figures['auc']:.4f}, chance bound {bound:.4f}"
