"""The feature-config language: tables, features and labels (``features/*.yaml``).

:func:`parse_feature_config` parses and cross-checks one; nothing else validates feature
configs. Each ``kind:`` is a class of :mod:`recsys_dist.features.kinds` with its fields
and its own checks; this module parses the mapping, loads tables and labels and runs the
checks that span features. ``docs/config.md`` gives every key, with examples.
"""

from __future__ import annotations

import dataclasses
import os

from recsys_dist.features.kinds import (
    FEATURE_KINDS as FEATURE_KINDS,
)
from recsys_dist.features.kinds import (
    CategoricalFeature as CategoricalFeature,
)
from recsys_dist.features.kinds import (
    CrossFeature as CrossFeature,
)
from recsys_dist.features.kinds import (
    FeatureKind,
)
from recsys_dist.features.kinds import (
    MultiCategoricalFeature as MultiCategoricalFeature,
)
from recsys_dist.features.kinds import (
    NumericFeature as NumericFeature,
)
from recsys_dist.features.kinds import (
    SequenceFeature as SequenceFeature,
)
from recsys_dist.features.tables import DYNAMIC_KEY_SPACE as DYNAMIC_KEY_SPACE
from recsys_dist.features.tables import TableSpec as TableSpec
from recsys_dist.features.tables import check_table
from recsys_dist.yaml_loader import LocatedYaml, load_yaml
from recsys_dist.yaml_schema import did_you_mean, parse_dataclass, parse_value


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


#: A parsed feature: an instance of one of the registered kinds' classes.
Feature = FeatureKind


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
        return feature.id_rows(self)

    def sequence_groups(self, names: list[str] | None = None) -> list[SequenceGroup]:
        """The histories among ``names`` (default: every feature), each with its sides.

        A side whose main sequence is not among ``names`` forms no group of its own; the
        config check makes sure a model's inputs never hold one without its main.
        """
        names = list(self.features) if names is None else list(names)
        sequences = [n for n in names if self.features[n].is_sequence]
        groups = []
        for name in sequences:
            feat = self.features[name]
            if feat.side_of is not None:
                continue
            sides = tuple(n for n in sequences if self.features[n].side_of == name)
            groups.append(
                SequenceGroup(name, sides, tuple(self.features[n].target for n in (name, *sides)))
            )
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
            raise doc.error(
                path + ".kind",
                "missing required key; expected one of "
                + ", ".join(repr(k) for k in FEATURE_KINDS),
            )
        if kind not in FEATURE_KINDS:
            raise doc.error(
                path + ".kind",
                f"got {kind!r}; expected one of "
                + ", ".join(repr(k) for k in FEATURE_KINDS)
                + "."
                + did_you_mean(kind, FEATURE_KINDS),
            )
        out[str(name)] = parse_dataclass(FEATURE_KINDS[kind], spec, doc, path, {"name": str(name)})
    return out


def _check_references(doc: LocatedYaml, config: FeatureConfig) -> FeatureConfig:
    """``config`` with its vocabularies loaded, after checking what features, labels and
    tables refer to (each feature's own references: its kind's ``check``)."""
    tables, features = config.tables, config.features
    vocabularies: dict[str, list] = {}
    columns_used: dict[str, str] = {}
    for name, feat in features.items():
        vocabulary = feat.check(doc, tables, features)
        if vocabulary is not None:
            vocabularies[name] = vocabulary
        for read in feat.column_reads(config):
            columns_used.setdefault(read.column, name)
    checked = dataclasses.replace(config, vocabularies=vocabularies)
    _check_table_rows(doc, checked)
    for name, label in config.labels.items():
        column = label.column or name
        if column in columns_used:
            raise doc.error(
                f"labels.{name}",
                f"label column {column!r} is also read by feature "
                f"{columns_used[column]!r}; a label must never be a feature",
            )
    unused = sorted(set(tables) - {f.table_name for f in features.values()})
    if unused:
        raise doc.error(f"tables.{unused[0]}", "is used by no feature; remove it or reference it")
    return checked


def _check_table_rows(doc: LocatedYaml, config: FeatureConfig) -> None:
    """Every table has the rows its features' ids need."""
    for name, feat in config.features.items():
        table = feat.table_name
        if table is None or config.tables[table].dynamic:
            continue
        need, what = feat.table_rows_needed(config)
        if need > config.tables[table].rows:
            raise doc.error(
                f"features.{name}",
                f"needs {need} rows ({what}) but table "
                f"{table!r} has rows={config.tables[table].rows}; raise "
                f"tables.{table}.rows",
            )


def parse_feature_config(doc: LocatedYaml) -> FeatureConfig:
    """Parses and cross-checks a loaded feature-config document."""
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("", f"got {data!r}; expected a mapping with tables, features, labels")
    allowed = {"tables", "features", "labels"}
    for key in data:
        if key not in allowed:
            raise doc.error(
                str(key),
                "unknown key; allowed keys are "
                + ", ".join(sorted(allowed))
                + "."
                + did_you_mean(key, allowed),
            )
    tables = parse_value(
        dict[str, TableSpec], data.get("tables") or {}, doc, "tables", {"key_field": "name"}
    )
    for table in tables.values():
        check_table(doc, table)
    features = _parse_features(doc, data.get("features"))
    if not data.get("labels"):
        raise doc.error(
            "labels",
            "no labels defined; expected at least one binary label, e.g. labels: {click: {}}",
        )
    labels = parse_value(dict[str, LabelSpec], data["labels"], doc, "labels", {"key_field": "name"})
    return _check_references(doc, FeatureConfig(doc.file, tables, features, labels))


def load_feature_config(path: str | os.PathLike[str]) -> FeatureConfig:
    """Loads, parses and validates the feature config at ``path``."""
    return parse_feature_config(load_yaml(path))
