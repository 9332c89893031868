"""Feature kinds: one class per ``kind:`` of a feature config, each in its own module.

A kind's class is the dataclass its features parse into and owns everything about them:
config checks, table and rows, Parquet columns, in-graph transform, example input,
``validate --scan`` ids (see :mod:`recsys_dist.config.kinds.base`). A new kind is one
module here with a ``@register_kind`` class, imported below, plus its test and its
section of docs/config.md.

The kinds register in the order of the imports below, the order of
:data:`FEATURE_KINDS`: error messages list them in it, and the transform runs kind after
kind in it (categorical before cross, so that a cross reuses its inputs' integer hashes).
"""

from recsys_dist.config.kinds.base import (
    FEATURE_KINDS,
    ColumnRead,
    FeatureKind,
    Need,
    register_kind,
    unregister_kind,
)
from recsys_dist.config.kinds.context import FeatureSet, IdScan, TransformContext

# The registry order: keep it.
# isort: off
from recsys_dist.config.kinds.categorical import CategoricalFeature
from recsys_dist.config.kinds.numeric import NumericFeature, missing_indicator_name
from recsys_dist.config.kinds.multi_categorical import MultiCategoricalFeature
from recsys_dist.config.kinds.cross import CrossFeature
from recsys_dist.config.kinds.sequence import SequenceFeature
# isort: on

__all__ = [
    "FEATURE_KINDS",
    "CategoricalFeature",
    "ColumnRead",
    "CrossFeature",
    "FeatureKind",
    "FeatureSet",
    "IdScan",
    "MultiCategoricalFeature",
    "Need",
    "NumericFeature",
    "SequenceFeature",
    "TransformContext",
    "missing_indicator_name",
    "register_kind",
    "unregister_kind",
]
