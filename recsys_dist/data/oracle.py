"""The true-logit columns of synthetic data (``recsys-dist data synth``).

Synthetic data stores each row's true logit, so evaluation can print the ceiling a model
could reach next to the model's own metrics. Real data has no such columns.
"""

from __future__ import annotations


def oracle_columns(labels: list[str], present: tuple[str, ...]) -> dict[str, str]:
    """Label -> the first of its candidate true-logit columns that the data has."""
    found = {}
    for i, label in enumerate(labels):
        for column in [f"oracle_logit_{label}"] + (["oracle_logit"] if i == 0 else []):
            if column in present:
                found[label] = column
                break
    return found


def oracle_candidates(labels: list[str]) -> tuple[str, ...]:
    """Columns that may hold a label's true logit (synthetic data): ``oracle_logit_<label>``,
    and ``oracle_logit`` for the first label (the layout of ``recsys-dist data synth``)."""
    return tuple(
        c
        for i, label in enumerate(labels)
        for c in [f"oracle_logit_{label}"] + (["oracle_logit"] if i == 0 else [])
    )
