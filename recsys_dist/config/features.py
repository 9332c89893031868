"""The feature-config language: tables, features and labels (``features/*.yaml``).

A feature config names the embedding tables, the features that read Parquet columns
and the binary labels::

    tables:
      ad_id: {rows: 1000000, dim: 16}
    features:
      C1: {kind: categorical, dtype: int64, table: ad_id}
      I1: {kind: numeric, transform: log1p, nan_means_missing: true}
      tags: {kind: multi_categorical, table: tag, max_length: 8, combiner: mean}
      C1_x_C2: {kind: cross, inputs: [C1, C2], table: cross}
      hist_item: {kind: sequence, table: ad_id, max_length: 50, target: C1}
    labels:
      click: {}

See ``docs/config.md`` for every key. Parsing and cross-reference checks happen in
:func:`parse_feature_config`; nothing else validates feature configs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import field
from typing import Literal, Union

from recsys_dist.config.schema import did_you_mean, parse_dataclass, parse_value
from recsys_dist.config.yaml_loader import LocatedYaml, load_yaml

IdDtype = Literal["int64", "string"]


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """An embedding table, possibly shared by several features.

    Attributes:
      name: Table name (the mapping key).
      dim: Embedding dimension.
      kind: ``hashed`` (ids hashed into ``rows`` rows; two ids may share one) or
        ``dynamic`` (every admitted id gets its own row on its parameter server).
      rows: Rows of a hashed table: the hash space or vocabulary size.
      capacity_per_shard: Rows of a dynamic table on each parameter server.
      admit_after: A dynamic table gives an id a row once it was seen in this many
        training batches; until then it reads a zero vector and gets no gradient.
      evict_after_days: Daily retraining drops, after its warm start, the ids of a dynamic
        table last trained more than this many days before the first day of its training
        window, and reuses their rows; ``None``: ids stay until the table is full.
    """

    name: str
    dim: int = field(metadata={"min": 1})
    kind: Literal["hashed", "dynamic"] = "hashed"
    rows: int | None = field(default=None, metadata={"min": 1})
    capacity_per_shard: int | None = field(default=None, metadata={"min": 1})
    admit_after: int = field(default=1, metadata={"min": 1})
    evict_after_days: int | None = field(default=None, metadata={"min": 1})

    @property
    def dynamic(self) -> bool:
        return self.kind == "dynamic"


#: The id space of a dynamic table's keys: features hash their values into
#: ``[0, DYNAMIC_KEY_SPACE)`` (the last key is the missing value's), and the table
#: gives each admitted key its own row.
DYNAMIC_KEY_SPACE = 2**62


@dataclasses.dataclass(frozen=True)
class CategoricalFeature:
    """A single id per row, int64 or string, looked up in an embedding table.

    Attributes:
      name: Feature name (the mapping key).
      table: Embedding table the ids index.
      dtype: ``int64`` for integer ids, ``string`` for string ids.
      column: Parquet column; defaults to ``name``.
      hash_buckets: Hash into this many rows; defaults to the table's ``rows``. The
        last of them is the missing row: a null id reads it, and no real id hashes to
        it.
      vocabulary: Text file with one id per line (relative to the feature config).
      oov_buckets: Rows for ids missing from ``vocabulary``; a null id reads one more
        row after them.
    """

    name: str
    table: str
    dtype: IdDtype
    kind: Literal["categorical"] = "categorical"
    column: str | None = None
    hash_buckets: int | None = field(default=None, metadata={"min": 1})
    vocabulary: str | None = None
    oov_buckets: int = field(default=1, metadata={"min": 1})


@dataclasses.dataclass(frozen=True)
class NumericFeature:
    """A float value per row, fed to the dense tower or bucketised into an embedded id.

    Attributes:
      transform: ``none``, ``log1p`` (signed: ``sign(x) * log1p(|x|)``),
        ``standardize`` (``(x - mean) / std``) or ``bucketize`` (into ``table``).
      mean, std: Required for ``standardize``.
      boundaries: Strictly increasing bucket edges, required for ``bucketize``.
      table: Embedding table for ``bucketize`` (rows >= len(boundaries) + 1).
      nan_means_missing: Treat NaN as a missing value, like a null. When false, NaN
        is bad data. Infinity is always bad data.
      fill_value: Value used for a missing input (a null, or NaN under
        ``nan_means_missing``), before the transform.
      missing_indicator: Also feed the dense tower a 0/1 input ``<name>.missing``,
        1 where the value was missing (not for ``bucketize``: give missing values a
        bucket of their own with a ``fill_value`` outside the boundaries).
    """

    name: str
    kind: Literal["numeric"] = "numeric"
    column: str | None = None
    transform: Literal["none", "log1p", "standardize", "bucketize"] = "none"
    mean: float | None = None
    std: float | None = field(default=None, metadata={"min": 1e-12})
    boundaries: list[float] | None = field(default=None, metadata={"min_items": 1})
    table: str | None = None
    nan_means_missing: bool = False
    fill_value: float = 0.0
    missing_indicator: bool = False


@dataclasses.dataclass(frozen=True)
class MultiCategoricalFeature:
    """Several ids per row: a Parquet list column (``list<int64>`` or ``list<string>``)
    or a delimited string column, e.g. ``"12|907|33"``.

    A null list (or null string) is an empty list; null ids inside a list are dropped.
    Integer ids of a list column hash as a categorical feature's integer ids do
    (splitmix64); string ids, and the tokens of a delimited string, with Fingerprint64.

    Attributes:
      table: Embedding table the ids index.
      max_length: Ids kept per row (the first ones); the rest are dropped.
      separator: Separator between ids (delimited string columns).
      combiner: How a row's embeddings are pooled: ``sum``, ``mean`` or ``sqrtn``.
      weighted: Entries of a delimited string are ``id:weight``; the weight scales the
        embedding.
      weight_separator: Separator between id and weight when ``weighted``.
      weights_column: A ``list<float>`` column parallel to a list column of ids: one
        weight per id (an id whose weight is null is dropped).
    """

    name: str
    table: str
    max_length: int = field(metadata={"min": 1})
    kind: Literal["multi_categorical"] = "multi_categorical"
    column: str | None = None
    separator: str = "|"
    combiner: Literal["sum", "mean", "sqrtn"] = "mean"
    weighted: bool = False
    weight_separator: str = ":"
    weights_column: str | None = None
    hash_buckets: int | None = field(default=None, metadata={"min": 1})
    vocabulary: str | None = None
    oov_buckets: int = field(default=1, metadata={"min": 1})


@dataclasses.dataclass(frozen=True)
class CrossFeature:
    """A hashed cross of two or more categorical features.

    Attributes:
      inputs: Names of categorical features to cross (at least two).
      table: Embedding table the crossed ids index.
      hash_buckets: Hash into this many rows; defaults to the table's ``rows``.
    """

    name: str
    table: str
    inputs: list[str] = field(metadata={"min_items": 2})
    kind: Literal["cross"] = "cross"
    hash_buckets: int | None = field(default=None, metadata={"min": 1})


@dataclasses.dataclass(frozen=True)
class SequenceFeature:
    """A behaviour history: the user's recent ids, in time order, compared with a candidate.

    Read from a Parquet list column (``list<int64>`` or ``list<string>``) or a delimited
    string column. The model input keeps the ``max_length`` most recent ids, newest
    first, padded after them. A null list (or null string) is an empty history; a null
    id inside a list is dropped (with ``side_of``, the whole position is dropped when
    any of the aligned ids is null). Ids hash exactly as a categorical feature's ids of
    the same ``dtype`` do, so a history that names its candidate's table shares its
    embeddings.

    Attributes:
      table: Embedding table the ids index (usually the candidate's table).
      max_length: Most recent ids kept per row; older ones are dropped.
      dtype: ``int64`` or ``string`` ids (as the candidate feature's ``dtype``).
      newest: Which end of the stored list is the most recent: ``last`` (ids appended
        as they happen, the usual layout) or ``first``.
      target: The categorical feature this history is compared with (the candidate,
        e.g. the ad's item id); it must read the same table. Attention models (``din``,
        ``bst``) need it on every sequence that is not a ``side_of``.
      side_of: Another sequence feature this one is aligned with position by position
        (e.g. the categories of the items of ``hist_item``): both lists have the same
        length in every row, and attention models concatenate each position's
        embeddings.
      pooling: How models without attention pool the history: ``mean`` or ``sum``.
      column: Parquet column; defaults to ``name``.
      separator: Separator between ids (delimited string columns).
      hash_buckets: Hash into this many rows; defaults to the table's ``rows`` (the
        last row is the missing row, as for a categorical feature).
    """

    name: str
    table: str
    max_length: int = field(metadata={"min": 1})
    kind: Literal["sequence"] = "sequence"
    dtype: IdDtype = "int64"
    newest: Literal["last", "first"] = "last"
    target: str | None = None
    side_of: str | None = None
    pooling: Literal["mean", "sum"] = "mean"
    column: str | None = None
    separator: str = "|"
    hash_buckets: int | None = field(default=None, metadata={"min": 2})


@dataclasses.dataclass(frozen=True)
class SequenceGroup:
    """A history and the sequences aligned with it, with the candidate features each is
    compared with.

    Attributes:
      main: The sequence feature the others are ``side_of``.
      sides: Sequence features aligned with ``main``, in feature-config order.
      targets: The ``target`` of ``main`` and of each side, in the same order (None
        where a sequence names none).
    """

    main: str
    sides: tuple[str, ...]
    targets: tuple[str | None, ...]

    @property
    def sequences(self) -> tuple[str, ...]:
        """``main`` and its sides: the order of each position's concatenated embeddings."""
        return (self.main, *self.sides)


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """A binary label column (values 0/1 or false/true).

    Attributes:
      name: Label name (the mapping key); models refer to labels by it.
      column: Parquet column; defaults to ``name``.
    """

    name: str
    column: str | None = None


Feature = Union[CategoricalFeature, NumericFeature, MultiCategoricalFeature, CrossFeature,
                SequenceFeature]
FEATURE_KINDS: dict[str, type] = {
    "categorical": CategoricalFeature,
    "numeric": NumericFeature,
    "multi_categorical": MultiCategoricalFeature,
    "cross": CrossFeature,
    "sequence": SequenceFeature,
}


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """A parsed and cross-checked feature config.

    Attributes:
      file: Path of the YAML file.
      tables: Embedding tables by name.
      features: Features by name, in file order.
      labels: Labels by name, in file order.
      vocabularies: Loaded vocabulary files by feature name (ids as strings or ints).
    """

    file: str
    tables: dict[str, TableSpec]
    features: dict[str, Feature]
    labels: dict[str, LabelSpec]
    vocabularies: dict[str, list] = dataclasses.field(default_factory=dict)

    def column_of(self, feature_or_label: Feature | LabelSpec) -> str:
        """Returns the Parquet column a feature or label reads."""
        return getattr(feature_or_label, "column", None) or feature_or_label.name

    def rows_of(self, feature: Feature) -> int:
        """Returns how many table rows a feature's ids span: the hash space, or the
        vocabulary + oov rows (+ the missing row of a categorical)."""
        if feature.name in self.vocabularies:
            missing_row = 1 if isinstance(feature, CategoricalFeature) else 0
            return len(self.vocabularies[feature.name]) + feature.oov_buckets + missing_row
        table = self.tables[feature.table]
        if table.dynamic:
            return DYNAMIC_KEY_SPACE
        return feature.hash_buckets or table.rows

    def sequence_groups(self, names: list[str] | None = None) -> list[SequenceGroup]:
        """The histories among ``names`` (default: every feature), each with its sides.

        A side whose main sequence is not among ``names`` forms no group of its own; the
        config check makes sure a model's inputs never hold one without its main.
        """
        names = list(self.features) if names is None else list(names)
        sequences = [n for n in names if isinstance(self.features[n], SequenceFeature)]
        groups = []
        for name in sequences:
            feat = self.features[name]
            if feat.side_of is not None:
                continue
            sides = tuple(n for n in sequences if self.features[n].side_of == name)
            groups.append(SequenceGroup(name, sides, tuple(
                self.features[n].target for n in (name, *sides))))
        return groups


def _parse_features(doc: LocatedYaml, raw: object) -> dict[str, Feature]:
    if raw is None or raw == {}:
        raise doc.error("features", "no features defined; expected a mapping of name to feature")
    if not isinstance(raw, dict):
        raise doc.error("features", f"got {raw!r}; expected a mapping of feature name to settings")
    out: dict[str, Feature] = {}
    for name, spec in raw.items():
        path = f"features.{name}"
        if not isinstance(spec, dict):
            raise doc.error(path, f"got {spec!r}; expected a mapping with a 'kind' key")
        kind = spec.get("kind")
        if kind is None:
            raise doc.error(path + ".kind", "missing required key; expected one of "
                            + ", ".join(repr(k) for k in FEATURE_KINDS))
        if kind not in FEATURE_KINDS:
            raise doc.error(path + ".kind", f"got {kind!r}; expected one of "
                            + ", ".join(repr(k) for k in FEATURE_KINDS) + "."
                            + did_you_mean(kind, FEATURE_KINDS))
        out[str(name)] = parse_dataclass(FEATURE_KINDS[kind], spec, doc, path, {"name": str(name)})
    return out


def _load_vocabulary(doc: LocatedYaml, path: str, file: str, dtype: str) -> list:
    full = file if os.path.isabs(file) else os.path.join(os.path.dirname(doc.file), file)
    try:
        with open(full, encoding="utf-8") as handle:
            entries = [line.rstrip("\n") for line in handle if line.strip()]
    except OSError as exc:
        raise doc.error(path, f"cannot read vocabulary file {full!r}: {exc.strerror}") from None
    if not entries:
        raise doc.error(path, f"vocabulary file {full!r} is empty; expected one id per line")
    if dtype == "int64":
        try:
            entries = [int(e) for e in entries]
        except ValueError as exc:
            raise doc.error(path, f"vocabulary file {full!r} has a non-integer id ({exc}); "
                            "dtype int64 needs one integer per line") from None
    if len(set(entries)) != len(entries):
        raise doc.error(path, f"vocabulary file {full!r} has duplicate ids")
    return entries


def _check_references(doc: LocatedYaml, config: FeatureConfig) -> FeatureConfig:
    """``config`` with its vocabularies loaded, after checking what features, labels and
    tables refer to."""
    tables, features = config.tables, config.features
    vocabularies: dict[str, list] = {}
    columns_used: dict[str, str] = {}
    for name, feat in features.items():
        vocabulary = _check_feature(doc, name, feat, tables, features)
        if vocabulary is not None:
            vocabularies[name] = vocabulary
        if not isinstance(feat, CrossFeature):
            columns_used.setdefault(feat.column or name, name)
    checked = dataclasses.replace(config, vocabularies=vocabularies)
    _check_table_rows(doc, checked)
    for name, label in config.labels.items():
        column = label.column or name
        if column in columns_used:
            raise doc.error(f"labels.{name}", f"label column {column!r} is also read by feature "
                            f"{columns_used[column]!r}; a label must never be a feature")
    unused = sorted(set(tables) - {getattr(f, "table", None) for f in features.values()})
    if unused:
        raise doc.error(f"tables.{unused[0]}", "is used by no feature; remove it or reference it")
    return checked


def _check_feature(doc: LocatedYaml, name: str, feat, tables: dict[str, TableSpec],
                   features: dict) -> list | None:
    """Checks one feature's references; returns its vocabulary when it has one."""
    path = f"features.{name}"
    table = getattr(feat, "table", None)
    if table is not None and table not in tables:
        raise doc.error(path + ".table", f"unknown table {table!r}; defined tables are "
                        + ", ".join(sorted(tables)) + "." + did_you_mean(table, tables))
    if table is not None and tables[table].dynamic:
        _check_dynamic_use(doc, path, feat, tables[table])
    vocabulary = None
    if isinstance(feat, (CategoricalFeature, MultiCategoricalFeature)):
        if feat.vocabulary is not None and feat.hash_buckets is not None:
            raise doc.error(path, "set either 'vocabulary' or 'hash_buckets', not both")
        if feat.vocabulary is not None:
            dtype = feat.dtype if isinstance(feat, CategoricalFeature) else "string"
            vocabulary = _load_vocabulary(doc, path + ".vocabulary", feat.vocabulary, dtype)
    if isinstance(feat, NumericFeature):
        _check_numeric(doc, path, feat, tables)
    if isinstance(feat, MultiCategoricalFeature) and feat.weights_column is not None:
        if feat.weighted:
            raise doc.error(path + ".weights_column", "set either 'weighted' (id:weight "
                            "entries in a delimited string) or 'weights_column' (a "
                            "parallel list<float> column), not both")
        if feat.weights_column == (feat.column or name):
            raise doc.error(path + ".weights_column", "names the ids column itself; "
                            "expected a separate list<float> column")
    if isinstance(feat, SequenceFeature):
        _check_sequence(doc, path, feat, tables, features)
    if isinstance(feat, CrossFeature):
        for i, inp in enumerate(feat.inputs):
            if inp not in features:
                raise doc.error(f"{path}.inputs[{i}]", f"unknown feature {inp!r}."
                                + did_you_mean(inp, features))
            if not isinstance(features[inp], CategoricalFeature):
                raise doc.error(f"{path}.inputs[{i}]", f"feature {inp!r} is "
                                f"{features[inp].kind}; a cross takes categorical features")
        if len(set(feat.inputs)) != len(feat.inputs):
            raise doc.error(path + ".inputs", "lists the same feature twice")
    return vocabulary


def _check_sequence(doc: LocatedYaml, path: str, feat: SequenceFeature,
                    tables: dict[str, TableSpec], features: dict) -> None:
    """A sequence's target reads its table and hashes its ids the same way; a side names
    a main sequence of the same length."""
    if feat.target is not None:
        target = features.get(feat.target)
        if target is None:
            raise doc.error(path + ".target", f"unknown feature {feat.target!r}."
                            + did_you_mean(feat.target, features))
        if not isinstance(target, CategoricalFeature):
            raise doc.error(path + ".target", f"feature {feat.target!r} is {target.kind}; "
                            "a sequence is compared with a categorical feature (the "
                            "candidate's id)")
        if target.table != feat.table:
            dims = (f"dim {tables[target.table].dim}" if target.table in tables else "")
            raise doc.error(path + ".target", f"feature {feat.target!r} reads table "
                            f"{target.table!r} ({dims}) but this sequence reads "
                            f"{feat.table!r} (dim {tables[feat.table].dim}); a history and "
                            "its candidate must read the same table, so that one id has one "
                            "embedding in both")
        if target.dtype != feat.dtype:
            raise doc.error(path + ".dtype", f"got {feat.dtype!r} but its target "
                            f"{feat.target!r} has dtype {target.dtype!r}; both must hash "
                            "their ids the same way")
        if target.vocabulary is not None:
            raise doc.error(path + ".target", f"feature {feat.target!r} maps its ids with a "
                            "vocabulary; a sequence hashes its ids, so its target must too "
                            "(remove the vocabulary or compare with another feature)")
        if (target.hash_buckets or None) != (feat.hash_buckets or None):
            raise doc.error(path + ".hash_buckets", f"got {feat.hash_buckets} but its target "
                            f"{feat.target!r} has hash_buckets {target.hash_buckets}; both "
                            "must map an id to the same row")
    if feat.side_of is not None:
        main = features.get(feat.side_of)
        if main is None:
            raise doc.error(path + ".side_of", f"unknown feature {feat.side_of!r}."
                            + did_you_mean(feat.side_of, features))
        if not isinstance(main, SequenceFeature) or main.side_of is not None:
            raise doc.error(path + ".side_of", f"feature {feat.side_of!r} is not a main "
                            "sequence; side_of names a sequence feature without side_of")
        for key in ("max_length", "newest"):
            if getattr(main, key) != getattr(feat, key):
                raise doc.error(f"{path}.{key}", f"got {getattr(feat, key)!r} but the "
                                f"sequence it is side_of, {feat.side_of!r}, has "
                                f"{getattr(main, key)!r}; aligned sequences keep the same "
                                "positions")


def _check_table_rows(doc: LocatedYaml, config: FeatureConfig) -> None:
    """Every table has the rows its features' ids need."""
    for name, feat in config.features.items():
        table = getattr(feat, "table", None)
        if table is None or config.tables[table].dynamic:
            continue
        need = config.rows_of(feat) if not isinstance(feat, NumericFeature) else \
            len(feat.boundaries or []) + 1
        if need > config.tables[table].rows:
            what = "vocabulary size + oov_buckets (+ 1 missing row)" \
                if name in config.vocabularies else (
                    "len(boundaries) + 1" if isinstance(feat, NumericFeature) else "hash_buckets")
            raise doc.error(f"features.{name}", f"needs {need} rows ({what}) but table "
                            f"{table!r} has rows={config.tables[table].rows}; raise "
                            f"tables.{table}.rows")


def _check_table(doc: LocatedYaml, table: TableSpec) -> None:
    """A hashed table has ``rows``; a dynamic one ``capacity_per_shard`` and no ``rows``."""
    path = f"tables.{table.name}"
    if not table.dynamic:
        if table.rows is None:
            raise doc.error(path + ".rows", "missing required key; a hashed table needs its "
                            "number of rows (or set kind: dynamic and capacity_per_shard)")
        for key in ("capacity_per_shard", "evict_after_days"):
            if getattr(table, key) is not None:
                raise doc.error(f"{path}.{key}", "only applies to kind: dynamic")
        if table.admit_after != 1:
            raise doc.error(f"{path}.admit_after", "only applies to kind: dynamic")
        return
    if table.rows is not None:
        raise doc.error(path + ".rows", "does not apply to kind: dynamic (every admitted id "
                        "gets its own row); set capacity_per_shard, the rows on each "
                        "parameter server")
    if table.capacity_per_shard is None:
        raise doc.error(path + ".capacity_per_shard", "missing required key; a dynamic table "
                        "needs the number of rows it may hold on each parameter server")


def _check_dynamic_use(doc: LocatedYaml, path: str, feat, table: TableSpec) -> None:
    """A dynamic table takes hashed ids: no vocabulary, no bucketized floats."""
    if isinstance(feat, NumericFeature):
        raise doc.error(path + ".table", f"table {table.name!r} is kind: dynamic, but "
                        f"numeric feature values are floats (bucket ids); give the buckets "
                        f"a hashed table with rows >= len(boundaries) + 1")
    for key in ("vocabulary", "hash_buckets"):
        if getattr(feat, key, None) is not None:
            raise doc.error(f"{path}.{key}", f"does not apply to a feature of dynamic table "
                            f"{table.name!r}: it gives every id its own row")


def _check_numeric(doc: LocatedYaml, path: str, feat: NumericFeature,
                   tables: dict[str, TableSpec]) -> None:
    if feat.transform == "standardize" and (feat.mean is None or feat.std is None):
        raise doc.error(path, "transform 'standardize' needs both 'mean' and 'std'")
    if feat.transform == "bucketize":
        if not feat.boundaries:
            raise doc.error(path, "transform 'bucketize' needs 'boundaries'")
        if feat.table is None:
            raise doc.error(path, "transform 'bucketize' needs a 'table' for the bucket ids")
        if feat.missing_indicator:
            raise doc.error(path + ".missing_indicator", "does not apply to transform "
                            "'bucketize'; give missing values a bucket of their own with a "
                            "fill_value outside the boundaries, e.g. below the first")
        if any(a >= b for a, b in zip(feat.boundaries, feat.boundaries[1:])):
            raise doc.error(path + ".boundaries", f"got {feat.boundaries}; "
                            "expected strictly increasing numbers")
    else:
        for key in ("boundaries", "table"):
            if getattr(feat, key) is not None:
                raise doc.error(f"{path}.{key}", f"only applies to transform 'bucketize', "
                                f"not {feat.transform!r}")
    if feat.transform != "standardize":
        for key in ("mean", "std"):
            if getattr(feat, key) is not None:
                raise doc.error(f"{path}.{key}", f"only applies to transform 'standardize', "
                                f"not {feat.transform!r}")


def parse_feature_config(doc: LocatedYaml) -> FeatureConfig:
    """Parses and cross-checks a loaded feature-config document."""
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("", f"got {data!r}; expected a mapping with tables, features, labels")
    allowed = {"tables", "features", "labels"}
    for key in data:
        if key not in allowed:
            raise doc.error(str(key), "unknown key; allowed keys are "
                            + ", ".join(sorted(allowed)) + "." + did_you_mean(key, allowed))
    tables = parse_value(dict[str, TableSpec], data.get("tables") or {}, doc, "tables",
                         {"key_field": "name"})
    for table in tables.values():
        _check_table(doc, table)
    features = _parse_features(doc, data.get("features"))
    if not data.get("labels"):
        raise doc.error("labels", "no labels defined; expected at least one binary label, "
                        "e.g. labels: {click: {}}")
    labels = parse_value(dict[str, LabelSpec], data["labels"], doc, "labels",
                         {"key_field": "name"})
    return _check_references(doc, FeatureConfig(doc.file, tables, features, labels))


def load_feature_config(path: str | os.PathLike[str]) -> FeatureConfig:
    """Loads, parses and validates the feature config at ``path``."""
    return parse_feature_config(load_yaml(path))
