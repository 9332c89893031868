"""Feature kinds: one class per ``kind:`` of a feature config, each in its own module.

A kind's class is the dataclass its features parse into and owns everything about them:
config checks, table and rows, Parquet columns, in-graph transform, example input,
``validate --scan`` ids (see :mod:`recsys_dist.features.kinds.base`). A new kind is one
module here with a ``@register_kind`` class (every module of this package is imported
below), plus its test and its section of docs/config.md. The order of the imports does
not matter: the transform runs each kind after the kinds its features depend on
(``depends_on``).
"""

import importlib
import pkgutil

from recsys_dist.features.kinds.base import (
    FEATURE_KINDS,
    ColumnRead,
    FeatureKind,
    Need,
    register_kind,
    unregister_kind,
)
from recsys_dist.features.kinds.categorical import CategoricalFeature
from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.kinds.cross import CrossFeature
from recsys_dist.features.kinds.multi_categorical import MultiCategoricalFeature
from recsys_dist.features.kinds.numeric import NumericFeature, missing_indicator_name
from recsys_dist.features.kinds.sequence import SequenceFeature

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

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
