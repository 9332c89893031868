"""Check Parquet schemas against a feature config and decide how to read each column.

tensorflow-io reads a column in its Parquet *physical* type and only scalar columns
(int, float, string, bool). So the coordinator decides, once, the physical type each
column is read as; every file must agree, and the in-graph transforms cast from it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import pyarrow as pa

from recsys_dist.config.features import (CategoricalFeature, FeatureConfig,
                                         MultiCategoricalFeature, NumericFeature)
from recsys_dist.config.schema import did_you_mean
from recsys_dist.data.parquet_meta import FileMeta
from recsys_dist.errors import DataError

Need = Literal["integer id", "string", "number", "binary label", "key"]

#: Parquet physical type -> TensorFlow dtype name tensorflow-io returns for it.
PHYSICAL_TO_TF = {"INT32": "int32", "INT64": "int64", "FLOAT": "float32", "DOUBLE": "float64",
                  "BYTE_ARRAY": "string", "BOOLEAN": "bool"}

_ACCEPTED: dict[Need, tuple[str, ...]] = {
    "integer id": ("integer",),
    "string": ("string",),
    "number": ("integer", "float"),
    "binary label": ("integer", "float", "bool"),
    "key": ("integer", "string", "bool"),
}
_EXPECTED_TEXT: dict[Need, str] = {
    "integer id": "an integer column (int8..int64)",
    "string": "a string column",
    "number": "an integer or floating-point column",
    "binary label": "an integer, boolean or floating-point column holding 0/1",
    "key": "an integer, string or boolean column (a group or slice key)",
}


@dataclasses.dataclass(frozen=True)
class ColumnNeed:
    """How the config uses one Parquet column.

    Attributes:
      column: Column name.
      needs: Each way it is read (a numeric feature and a categorical may share one).
      users: Feature or label names that read it, for messages.
    """

    column: str
    needs: tuple[Need, ...]
    users: tuple[str, ...]


def required_columns(features: FeatureConfig, labels: list[str] | None = None
                     ) -> dict[str, ColumnNeed]:
    """Returns every column the features and ``labels`` (default: all) read, in order."""
    wanted: dict[str, tuple[list[Need], list[str]]] = {}

    def add(column: str, need: Need, user: str) -> None:
        needs, users = wanted.setdefault(column, ([], []))
        if need not in needs:
            needs.append(need)
        users.append(user)

    for name, feat in features.features.items():
        if isinstance(feat, CategoricalFeature):
            add(features.column_of(feat), "integer id" if feat.dtype == "int64" else "string",
                f"feature {name!r}")
        elif isinstance(feat, MultiCategoricalFeature):
            add(features.column_of(feat), "string", f"feature {name!r}")
        elif isinstance(feat, NumericFeature):
            add(features.column_of(feat), "number", f"feature {name!r}")
    for name in labels or list(features.labels):
        add(features.column_of(features.labels[name]), "binary label", f"label {name!r}")
    return {c: ColumnNeed(c, tuple(n), tuple(u)) for c, (n, u) in wanted.items()}


def _family(arrow_type: pa.DataType) -> str:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_fixed_size_list(arrow_type):
        return "list"
    if pa.types.is_struct(arrow_type) or pa.types.is_map(arrow_type):
        return "nested"
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or \
            pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "string"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    return "unsupported"


def _list_advice(column: str) -> str:
    return (f"tensorflow-io reads only scalar columns, so store {column!r} as a delimited "
            f"string such as \"12|907|33\" (e.g. pyarrow.compute.binary_join("
            f"pyarrow.compute.cast(table[{column!r}], pyarrow.list_(pyarrow.string())), \"|\")) "
            "and read it with kind: multi_categorical, separator: \"|\"")


def check_file_schema(meta: FileMeta, needs: dict[str, ColumnNeed]) -> dict[str, str]:
    """Checks one file; returns the TensorFlow dtype name to read each needed column as.

    Raises:
      DataError: a column is missing, a list or nested column, or of the wrong type.
    """
    names = meta.schema.names
    dtypes: dict[str, str] = {}
    for column, need in needs.items():
        users = ", ".join(need.users)
        if column not in names:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
            raise DataError(f"{meta.path}: column {column!r} (read by {users}) is missing."
                            f"{did_you_mean(column, names)} The file has columns: {shown}")
        arrow_type = meta.schema.field(column).type
        family = _family(arrow_type)
        if family == "list":
            raise DataError(f"{meta.path}: column {column!r} (read by {users}) is a list column "
                            f"({arrow_type}); {_list_advice(column)}")
        if family == "nested":
            raise DataError(f"{meta.path}: column {column!r} (read by {users}) is a nested "
                            f"{arrow_type} column; tensorflow-io reads only scalar int, float, "
                            "string and bool columns, so flatten it into scalar columns")
        for n in need.needs:
            if family not in _ACCEPTED[n]:
                raise DataError(f"{meta.path}: column {column!r} has type {arrow_type}, but "
                                f"{users} needs {_EXPECTED_TEXT[n]}")
        physical = meta.physical.get(column)
        if physical not in PHYSICAL_TO_TF:
            raise DataError(f"{meta.path}: column {column!r} has Parquet physical type "
                            f"{physical} ({arrow_type}), which tensorflow-io cannot read")
        dtypes[column] = PHYSICAL_TO_TF[physical]
    return dtypes


def check_schemas(metas: list[FileMeta], needs: dict[str, ColumnNeed]) -> dict[str, str]:
    """Checks every file and that all files store each column the same way.

    Returns:
      The TensorFlow dtype name to read each needed column as.

    Raises:
      DataError: a file fails :func:`check_file_schema`, or two files disagree.
    """
    agreed: dict[str, str] = {}
    first_file: dict[str, str] = {}
    for meta in metas:
        for column, dtype in check_file_schema(meta, needs).items():
            if column not in agreed:
                agreed[column], first_file[column] = dtype, meta.path
            elif agreed[column] != dtype:
                raise DataError(f"column {column!r} is stored as {agreed[column]} in "
                                f"{first_file[column]} but as {dtype} in {meta.path}; every file "
                                "of a job must store a column with the same type")
    return agreed
