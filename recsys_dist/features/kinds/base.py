"""The base class of feature kinds and their registry (``kind:`` in a feature config).

A feature kind is one class: the frozen dataclass a feature of that kind parses into from
YAML, whose methods answer everything else about it (config checks, table and rows,
Parquet columns, in-graph transform, model inputs, ``validate --scan`` ids).
:func:`register_kind` puts it in :data:`FEATURE_KINDS`; the rest of the package asks a
feature (``feature.table_name``, ``Kind.transform_all(features, context)``) and never
tests which kind it is. Kind modules import TensorFlow and numpy through
:mod:`recsys_dist.lazy`, so the feature config imports without them.
tests/unit/features/test_feature_kinds.py defines a whole kind inside a test.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.tables import DYNAMIC_KEY_SPACE, TableSpec
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml
from recsys_dist.yaml_schema import did_you_mean

#: What a Parquet column must hold for its reader (checked by
#: :mod:`recsys_dist.data.schema_check`, which also decides the dtype it is read as).
Need = Literal["integer id", "string", "ids", "weights", "number", "binary label", "key"]


class ColumnRead(NamedTuple):
    """One Parquet column a feature reads, and what it must hold.

    Attributes:
      column: Column name.
      need: What the column must hold.
      user: Who reads it, for messages, e.g. ``feature 'tags' (weights_column)``.
    """

    column: str
    need: Need
    user: str


class FeatureKind(abc.ABC):
    """The base of every feature kind's dataclass.

    A kind's dataclass has the fields ``name`` (the feature's name, the mapping key) and
    ``kind: Literal["<its name>"] = "<its name>"``, plus its own settings. It must define
    :meth:`column_reads` and :meth:`transform_all`; every other method has a default
    for a single-id feature of a hashed ``table`` (or a dense one without a table).
    """

    name: str
    kind: str

    #: The model input is ``{"ids": int64 [N, L], "weights": float32 [N, L]}``, pooled
    #: into one embedding by :meth:`embedding_combiner`, not one value per row.
    multi_valued: ClassVar[bool] = False
    #: A behaviour history (:meth:`FeatureConfig.sequence_groups` groups them).
    is_sequence: ClassVar[bool] = False

    # ---- the config -----------------------------------------------------------------
    @property
    def table_name(self) -> str | None:
        """The embedding table its ids index, or None for a dense input."""
        return getattr(self, "table", None)

    @property
    def id_valued(self) -> bool:
        """Its model input holds table rows (looked up in :attr:`table_name`)."""
        return self.table_name is not None

    def depends_on(self) -> tuple[str, ...]:
        """Other features whose columns its transform reads (a cross's inputs). Its kind's
        transform runs after the kinds of these (a cross reuses the integer hashes its
        categorical inputs computed)."""
        return ()

    def check(
        self, doc: LocatedYaml, tables: Mapping[str, TableSpec], features: Mapping[str, FeatureKind]
    ) -> list | None:
        """Checks what the feature refers to; returns its vocabulary when it has one.

        The table it names exists, a dynamic one can take its ids
        (:meth:`check_dynamic_table`), then the kind's own checks
        (:meth:`check_references`). Every error is ``doc.error`` at the key's line.
        """
        path = f"features.{self.name}"
        table = getattr(self, "table", None)  # as named (numeric: also without bucketize)
        if table is not None and table not in tables:
            raise doc.error(
                path + ".table",
                f"unknown table {table!r}; defined tables are "
                + ", ".join(sorted(tables))
                + "."
                + did_you_mean(table, tables),
            )
        if table is not None and tables[table].dynamic:
            self.check_dynamic_table(doc, path, tables[table])
        return self.check_references(doc, path, tables, features)

    def check_dynamic_table(self, doc: LocatedYaml, path: str, table: TableSpec) -> None:
        """A dynamic table takes hashed ids: no vocabulary, no hash_buckets."""
        for key in ("vocabulary", "hash_buckets"):
            if getattr(self, key, None) is not None:
                raise doc.error(
                    f"{path}.{key}",
                    f"does not apply to a feature of dynamic "
                    f"table {table.name!r}: it gives every id its own row",
                )

    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        """The kind's own checks (``path`` is ``features.<name>``); returns a vocabulary
        it loaded, if any."""
        return None

    def id_rows(self, config: FeatureSet) -> int:
        """How many table rows its ids span: its ``hash_buckets``, else its table's
        ``rows`` (the last is the missing row); a dynamic table's key space."""
        if self.table_name is None:
            raise ValueError(f"feature {self.name!r} reads no table")
        table = config.tables[self.table_name]
        if table.dynamic:
            return DYNAMIC_KEY_SPACE
        return getattr(self, "hash_buckets", None) or table.rows

    def table_rows_needed(self, config: FeatureSet) -> tuple[int, str]:
        """``(rows its table needs, where that number comes from)``, for the table check."""
        if self.name in config.vocabularies:
            return self.id_rows(config), "vocabulary size + oov_buckets (+ 1 missing row)"
        return self.id_rows(config), "hash_buckets"

    # ---- the data -------------------------------------------------------------------
    @abc.abstractmethod
    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        """The Parquet columns it reads itself (its own column first) and their needs."""

    # ---- the model inputs -----------------------------------------------------------
    def outputs(self) -> tuple[str, ...]:
        """The model inputs it produces, in order: its name, then any extra dense input."""
        return (self.name,)

    def embedding_combiner(self, keep_sequences: bool) -> str | None:
        """How a multi-valued input becomes one embedding (``keep``: left a sequence, for
        attention models), or None for a single id."""
        return None

    def example_input(self, batch_size: int) -> dict[str, Any]:
        """Zeros shaped like its model inputs for ``batch_size`` rows (to build
        variables): int64 table rows, or float32 dense values."""
        if self.id_valued:
            return {self.name: tf.zeros([batch_size], tf.int64)}
        return {name: tf.zeros([batch_size], tf.float32) for name in self.outputs()}

    def prepare(self, config: FeatureSet) -> Any:
        """What its transform needs built once, eagerly, before any graph is traced (a
        vocabulary lookup); None for nothing. Given back as ``context.prepared[name]``."""
        return None

    def int_hash_columns(self, config: FeatureSet) -> list[str]:
        """Integer columns whose ``hash_int64`` its transform reads from
        ``context.int_hashes`` (computed once, stacked, for every feature)."""
        return []

    @classmethod
    @abc.abstractmethod
    def transform_all(cls, features: list, context: TransformContext) -> dict[str, Any]:
        """The model inputs of every feature of this kind for one chunk of N rows.

        Args:
          features: The features of this kind the transform produces, in config order.
          context: The chunk's raw columns and validity, the list of row checks to
            append to, the shared integer hashes, what :meth:`prepare` built, and the
            fused kernels when they apply.

        Returns:
          Each name of each feature's :meth:`outputs` -> its tensor (more names are
          ignored).
        """

    # ---- validate --scan ------------------------------------------------------------
    def scan_columns(self, config: FeatureSet) -> list[str]:
        """The columns ``validate --scan`` reads to count its ids; none: it has no ids
        counted (a dense or bucketized numeric)."""
        return []

    def scan_ids(self, scan: IdScan) -> tuple[Any, Any]:
        """``(identity keys, table rows)`` of the ids it looks up in one record batch:
        int64 numpy arrays, one entry per lookup (nulls are no ids)."""
        raise NotImplementedError(
            f"feature kind {self.kind!r} names scan_columns but does not define scan_ids"
        )


#: Kind name -> its class, in the order the kinds were registered (error messages list
#: them in it; the transform's order comes from ``depends_on``, not from this one).
FEATURE_KINDS: dict[str, type[FeatureKind]] = {}

_Kind = TypeVar("_Kind", bound=type)


def register_kind(name: str) -> Callable[[_Kind], _Kind]:
    """Registers the feature kind ``name`` on the dataclass it decorates.

    Raises:
      ValueError: ``name`` is registered already.
      TypeError: The class is not a :class:`FeatureKind` dataclass with the fields
        ``name`` and ``kind = name``, or it leaves an abstract method undefined.
    """

    def register(cls: _Kind) -> _Kind:
        if not (issubclass(cls, FeatureKind) and dataclasses.is_dataclass(cls)):
            raise TypeError(
                f"register_kind({name!r}) decorates a FeatureKind dataclass; got "
                f"{cls!r} (put @register_kind above @dataclasses.dataclass)"
            )
        if inspect.isabstract(cls):
            raise TypeError(
                f"feature kind {name!r} ({cls.__qualname__}) does not define "
                + ", ".join(sorted(cls.__abstractmethods__))
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if "name" not in fields or "kind" not in fields or fields["kind"].default != name:
            raise TypeError(
                f"feature kind {name!r} ({cls.__qualname__}) needs the fields "
                f"name: str and kind: Literal[{name!r}] = {name!r}"
            )
        if name in FEATURE_KINDS:
            raise ValueError(
                f"feature kind {name!r} is registered already (by "
                f"{FEATURE_KINDS[name].__qualname__}); choose another name"
            )
        FEATURE_KINDS[name] = cls
        return cls

    return register


def unregister_kind(name: str) -> None:
    """Removes the feature kind ``name`` from the registry (tests that register their own).

    Raises:
      KeyError: No kind of that name is registered.
    """
    if name not in FEATURE_KINDS:
        raise KeyError(f"no feature kind {name!r} is registered")
    del FEATURE_KINDS[name]
