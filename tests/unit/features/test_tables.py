"""Embedding tables of a feature config (``recsys_dist/features/tables.py``): what a hashed and
a dynamic table need, and the rejection of each key that does not apply to its kind."""

from __future__ import annotations

import re

import pytest

from recsys_dist.errors import ConfigError
from recsys_dist.features.tables import TableSpec, check_table
from recsys_dist.yaml_loader import load_yaml
from recsys_dist.yaml_schema import parse_value
from tests.support.configs import line_of, write_yaml


def checked(tmp_path, table: dict) -> TableSpec:
    """Parses ``tables: {ads: table}`` the way the feature config does, then checks it."""
    path = write_yaml(tmp_path / "features.yaml", {"tables": {"ads": table}})
    doc = load_yaml(path)
    spec = parse_value(
        dict[str, TableSpec], doc.data["tables"], doc, "tables", {"key_field": "name"}
    )["ads"]
    check_table(doc, spec)
    return spec


def test_a_hashed_table_has_rows(tmp_path):
    spec = checked(tmp_path, {"rows": 1000, "dim": 8})
    assert spec == TableSpec("ads", 8, "hashed", 1000)
    assert not spec.dynamic and spec.admit_after == 1


def test_a_dynamic_table_has_a_capacity_per_shard(tmp_path):
    spec = checked(
        tmp_path,
        {
            "kind": "dynamic",
            "dim": 4,
            "capacity_per_shard": 500,
            "admit_after": 3,
            "evict_after_days": 30,
        },
    )
    assert spec.dynamic and spec.rows is None
    assert (spec.capacity_per_shard, spec.admit_after, spec.evict_after_days) == (500, 3, 30)
    assert spec.evict_after_hours == 30 * 24


@pytest.mark.parametrize("duration, hours", [("36h", 36), ("2d", 48), ("1 h", 1), (None, None)])
def test_evict_after_is_a_duration_in_hours_or_days(tmp_path, duration, hours):
    table = {"kind": "dynamic", "dim": 4, "capacity_per_shard": 10}
    if duration is not None:
        table["evict_after"] = duration
    assert checked(tmp_path, table).evict_after_hours == hours


@pytest.mark.parametrize(
    "table, key, message",
    [
        (
            {"dim": 8},
            "rows",
            "missing required key; a hashed table needs its number of rows (or "
            "set kind: dynamic and capacity_per_shard)",
        ),
        (
            {"dim": 8, "rows": 10, "capacity_per_shard": 5},
            "capacity_per_shard",
            "only applies to kind: dynamic",
        ),
        (
            {"dim": 8, "rows": 10, "evict_after_days": 5},
            "evict_after_days",
            "only applies to kind: dynamic",
        ),
        ({"dim": 8, "rows": 10, "admit_after": 2}, "admit_after", "only applies to kind: dynamic"),
        (
            {"dim": 8, "rows": 10, "evict_after": "2h"},
            "evict_after",
            "only applies to kind: dynamic",
        ),
        (
            {"kind": "dynamic", "dim": 8, "capacity_per_shard": 5, "evict_after": "90m"},
            "evict_after",
            "'90m' is not a duration; expected a whole number of hours or days, such as 36h or 7d",
        ),
        (
            {"kind": "dynamic", "dim": 8, "capacity_per_shard": 5, "evict_after": "0h"},
            "evict_after",
            "'0h' is not a duration; expected a whole number of hours or days, such as 36h or 7d",
        ),
        (
            {
                "kind": "dynamic",
                "dim": 8,
                "capacity_per_shard": 5,
                "evict_after": "2h",
                "evict_after_days": 1,
            },
            "evict_after_days",
            "set evict_after or evict_after_days, not both",
        ),
        (
            {"kind": "dynamic", "dim": 8, "rows": 10, "capacity_per_shard": 5},
            "rows",
            "does not apply to kind: dynamic (every admitted id gets its own row); set "
            "capacity_per_shard, the rows on each parameter server",
        ),
        (
            {"kind": "dynamic", "dim": 8},
            "capacity_per_shard",
            "missing required key; a dynamic table needs the number of rows it may hold on each "
            "parameter server",
        ),
    ],
)
def test_each_key_that_does_not_fit_the_kind_is_named(tmp_path, table, key, message):
    with pytest.raises(ConfigError) as raised:
        checked(tmp_path, table)
    path = str(tmp_path / "features.yaml")
    line = line_of((tmp_path / "features.yaml").read_text(), "ads")
    assert str(raised.value) == f"{path}:{line}: tables.ads.{key}: {message}"


@pytest.mark.parametrize(
    "table, pattern",
    [
        ({"dim": 0, "rows": 10}, "tables.ads.dim: got 0; expected a value >= 1"),
        ({"dim": 8, "rows": 0}, "tables.ads.rows: got 0; expected a value >= 1"),
        (
            {"dim": 8, "kind": "static", "rows": 10},
            "tables.ads.kind: got 'static'; expected one of 'hashed', 'dynamic'.",
        ),
        (
            {"kind": "dynamic", "dim": 8, "capacity_per_shard": 5, "admit_after": 0},
            "tables.ads.admit_after: got 0; expected a value >= 1",
        ),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, table, pattern):
    with pytest.raises(ConfigError, match=re.escape(pattern)):
        checked(tmp_path, table)
