"""A model's footprint (what the capacity planner reads of it) against the real model."""

from __future__ import annotations

import math

from recsys_dist.config import load_config
from recsys_dist.models.footprint import model_footprint
from recsys_dist.models.zoo import build_from_config
from tests.support.configs import SMALL_FEATURES, changed


def test_the_footprint_is_the_real_models(small_config):
    config = load_config(small_config())
    footprint = model_footprint(config)
    # ads: ad and site (1 id each); tag: tags (max_length 3)
    (stack,) = footprint.stacks
    assert stack.dim == 4 and {t.name: (t.rows, t.ids_per_example) for t in stack.tables} == {
        "ads": (1000, 2),
        "tag": (100, 3),
    }
    model = build_from_config(config)
    assert footprint.dense_parameters == sum(math.prod(v.shape) for v in model.dense_variables)
    assert sorted(v.name for v in footprint.dense) == sorted(
        v.name.split(":")[0] for v in model.dense_variables
    )
    assert stack.name in [v.name for v in footprint.created]


def test_a_linear_part_and_a_dynamic_table(small_config):
    features = changed(
        SMALL_FEATURES, {"tables.tag": {"kind": "dynamic", "dim": 4, "capacity_per_shard": 50}}
    )
    config = load_config(
        small_config(features),
        ["model.name=wide_deep", "model.inputs={wide: [ad, tags], deep: [ad, site, price, tags]}"],
    )
    footprint = model_footprint(config)
    # the wide part's per-id weights: a stack of dim 1 (one label), marked linear; the ids
    # of ad and site add up in the deep part's table
    assert sorted((s.dim, s.linear, [t.name for t in s.tables]) for s in footprint.stacks) == [
        (1, True, ["ads"]),
        (4, False, ["ads"]),
    ]
    # the dynamic table in both parts: capacity per shard, no row span, never placed whole
    assert sorted(
        (d.dim, d.linear, d.table.rows, d.table.ids_per_example, d.table.id_span)
        for d in footprint.dynamic
    ) == [(1, True, 50, 3, None), (4, False, 50, 3, None)]
    assert not any("tag" in v.name for v in footprint.created)
