"""Check Parquet schemas against a feature config and decide how to read each column.

The coordinator decides, once, the dtype each column is read as (``int32``, ``int64``,
``float32``, ``float64``, ``bool``, ``string``, or ``list<int64>``, ``list<string>``,
``list<float32>`` for list columns); every file must agree, and the in-graph
transforms cast from it. Nulls are allowed anywhere: the null policy of each feature
(docs/data.md) decides what they become. Which columns a feature reads, and what each
must hold (a :data:`Need`), its kind says (``column_reads``).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from recsys_dist.data.parquet_meta import FileMeta
from recsys_dist.errors import DataError
from recsys_dist.features.config import FeatureConfig
from recsys_dist.features.kinds import Need as Need
from recsys_dist.yaml_schema import did_you_mean

LIST_PREFIX = "list<"

_ACCEPTED: dict[Need, tuple[str, ...]] = {
    "integer id": ("integer",),
    "string": ("string",),
    "ids": ("string", "list<integer>", "list<string>"),
    "weights": ("list<integer>", "list<float>"),
    "number": ("integer", "float"),
    "binary label": ("integer", "float", "bool"),
    "key": ("integer", "string", "bool"),
}
_EXPECTED_TEXT: dict[Need, str] = {
    "integer id": "an integer column (int8..int64)",
    "string": "a string column",
    "ids": "a list<int64> or list<string> column, or a delimited string column",
    "weights": "a list<float> column with one weight per id",
    "number": "an integer or floating-point column",
    "binary label": "an integer, boolean or floating-point column holding 0/1",
    "key": "an integer, string or boolean column (a group or slice key)",
}


def split_read_dtype(read_dtype: str) -> tuple[str, bool]:
    """``"list<int64>"`` -> ``("int64", True)``; ``"float32"`` -> ``("float32", False)``."""
    if read_dtype.startswith(LIST_PREFIX):
        return read_dtype[len(LIST_PREFIX) : -1], True
    return read_dtype, False


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


def required_columns(
    features: FeatureConfig, labels: list[str] | None = None
) -> dict[str, ColumnNeed]:
    """Returns every column the features and ``labels`` (default: all) read, in order."""
    wanted: dict[str, tuple[list[Need], list[str]]] = {}

    def add(column: str, need: Need, user: str) -> None:
        needs, users = wanted.setdefault(column, ([], []))
        if need not in needs:
            needs.append(need)
        users.append(user)

    for feat in features.features.values():
        for read in feat.column_reads(features):  # what the feature's kind reads
            add(read.column, read.need, read.user)
    for name in labels or list(features.labels):
        add(features.column_of(features.labels[name]), "binary label", f"label {name!r}")
    return {c: ColumnNeed(c, tuple(n), tuple(u)) for c, (n, u) in wanted.items()}


def _scalar_family(arrow_type: pa.DataType) -> str:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type):
        return "float"
    if (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
    ):
        return "string"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    return "unsupported"


def _family(arrow_type: pa.DataType) -> str:
    """``integer``, ``float``, ``string``, ``bool``, ``list<integer>``, ... or
    ``nested`` / ``unsupported``."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        element = _scalar_family(arrow_type.value_type)
        return "unsupported" if element == "unsupported" else f"list<{element}>"
    if (
        pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_struct(arrow_type)
        or pa.types.is_map(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
    ):
        return "nested"
    return _scalar_family(arrow_type)


def _read_dtype(arrow_type: pa.DataType, family: str, needs: tuple[Need, ...]) -> str:
    """The dtype the op reads a column as (see the module docstring)."""
    if family.startswith(LIST_PREFIX):
        if "weights" in needs:
            return "list<float32>"
        return "list<string>" if family == "list<string>" else "list<int64>"
    value_type = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    if family == "integer":
        narrow = value_type.bit_width <= 32 and not (pa.types.is_uint32(value_type))
        return "int32" if narrow else "int64"
    if family == "float":
        return "float32" if pa.types.is_float32(value_type) else "float64"
    return family  # string, bool


def check_file_schema(meta: FileMeta, needs: dict[str, ColumnNeed]) -> dict[str, str]:
    """Checks one file; returns the dtype to read each needed column as.

    Raises:
      DataError: a column is missing, nested, or of the wrong type (a list where a
        scalar is expected, or the reverse).
    """
    names = meta.schema.names
    dtypes: dict[str, str] = {}
    for column, need in needs.items():
        users = ", ".join(need.users)
        if column not in names:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
            raise DataError(
                f"{meta.path}: column {column!r} (read by {users}) is missing."
                f"{did_you_mean(column, names)} The file has columns: {shown}"
            )
        arrow_type = meta.schema.field(column).type
        family = _family(arrow_type)
        if family == "nested":
            raise DataError(
                f"{meta.path}: column {column!r} (read by {users}) is a nested "
                f"{arrow_type} column; recsys_dist reads scalar int, float, string "
                "and bool columns and list<...> of them, so flatten it"
            )
        for n in need.needs:
            if family not in _ACCEPTED[n]:
                what = " (a list column)" if family.startswith(LIST_PREFIX) else ""
                raise DataError(
                    f"{meta.path}: column {column!r} has type {arrow_type}{what}, "
                    f"but {users} needs {_EXPECTED_TEXT[n]}"
                )
        dtypes[column] = _read_dtype(arrow_type, family, need.needs)
    return dtypes


def check_schemas(metas: list[FileMeta], needs: dict[str, ColumnNeed]) -> dict[str, str]:
    """Checks every file and that all files store each column the same way.

    Returns:
      The dtype to read each needed column as (see the module docstring).

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
                raise DataError(
                    f"column {column!r} is stored as {agreed[column]} in "
                    f"{first_file[column]} but as {dtype} in {meta.path}; every file "
                    "of a job must store a column with the same type"
                )
    return agreed
