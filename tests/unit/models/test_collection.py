"""The embedding collection: the groups a model builds, one lookup of all of them, and
the checkpoint paths of every zoo model's groups."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.config.model_params import DCNv2Params
from recsys_dist.models.collection import EmbeddingCollection
from recsys_dist.models.embedding import FeatureEmbeddings, FeatureLinear
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import MODELS, build_model
from recsys_dist.models.zoo.dcn_v2 import DCNv2
from tests.support.models import (
    LABELS,
    TINY_FEATURES,
    model_inputs,
    tiny_batch,
    write_feature_config,
)


@pytest.fixture
def features(tmp_path):
    doc = copy.deepcopy(TINY_FEATURES)
    doc["tables"]["user"] = {"kind": "dynamic", "dim": 4, "capacity_per_shard": 100}
    return write_feature_config(tmp_path, doc)


def test_one_lookup_of_all_groups_gives_each_group_what_it_gives_alone(features):
    collection = EmbeddingCollection(features, Placement(dynamic_shards=2))
    deep = collection.embeddings(list(features.features), "deep", seed=1)
    linear = collection.linear(["ad_id", "user_id", "price"], 2, "linear")
    assert [g.name for g in collection.groups] == ["deep", "linear_embeddings"]
    assert [collection.is_linear(g) for g in collection.groups] == [False, True]
    assert (
        set(collection.dynamic_tables) == {"user"} and len(collection.dynamic_tables["user"]) == 2
    )
    batch, _ = tiny_batch()
    embedded = collection.lookup(batch, training=True)  # admits the batch's users
    for group in (deep, linear.embeddings):
        sparse, dense = embedded[group]
        alone_sparse, alone_dense = group(batch, training=False)
        assert list(sparse) == list(alone_sparse)
        for name in sparse:  # the same rows through the same ops
            np.testing.assert_array_equal(sparse[name].numpy(), alone_sparse[name].numpy())
        np.testing.assert_array_equal(dense.numpy(), alone_dense.numpy())
    assert embedded["deep"] is not None and embedded[deep] == embedded["deep"]


def test_refusals_name_the_group(features):
    collection = EmbeddingCollection(features)
    collection.embeddings(["ad_id"], "deep")
    with pytest.raises(ValueError, match="two embedding groups named 'deep'"):
        collection.embeddings(["user_id"], "deep")
    embedded = collection.lookup(tiny_batch()[0])
    with pytest.raises(KeyError, match=r"no embedding group 'wide'; the model has \['deep'\]"):
        embedded["wide"]
    weights = FeatureEmbeddings(features, ["ad_id"], dim_override=3, name="w")
    with pytest.raises(ValueError, match=r"lin: per-id weights of dim \[3\] for 2 output"):
        FeatureLinear(weights, 2, name="lin")


def test_a_group_the_model_does_not_keep_is_refused(features):
    class Forgetful(DCNv2):
        """DCN-v2 that builds a second group and keeps it nowhere."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.embedding_collection.embeddings(["ad_id"], "forgotten")

        @classmethod
        def registration(cls):
            return DCNv2.registration()

    model = Forgetful(features, model_inputs("dcn_v2", features), LABELS, DCNv2Params())
    with pytest.raises(TypeError, match="'forgotten' but keeps it in no attribute"):
        model.create_variables()


# Where each zoo model keeps its groups: their tables are saved under these object paths,
# the paths every earlier checkpoint of the model used (warm start and resume read them).
GROUP_PATHS = {
    "lr": ["linear/embeddings"],
    "wide_deep": ["wide/embeddings", "embeddings"],
    "deepfm": ["embeddings", "linear/embeddings"],
    "dcn_v2": ["embeddings"],
    "dlrm": ["embeddings"],
    "mmoe": ["embeddings"],
    "din": ["inputs_layer/embeddings"],
    "bst": ["inputs_layer/embeddings"],
    "dien": ["inputs_layer/embeddings"],
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_group_is_saved_where_the_model_keeps_it(name, features, tmp_path):
    model = build_model(
        name,
        features,
        model_inputs(name, features),
        LABELS,
        seed=0,
        placement=Placement(dynamic_shards=2),
    )
    model.create_variables()
    keys = [
        k
        for k, _ in tf.train.list_variables(
            tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
        )
    ]
    groups = model.embedding_collection.groups
    assert len(groups) == len(GROUP_PATHS[name])
    for group, path in zip(groups, GROUP_PATHS[name]):
        dim = int(group.stacks[0].variable.shape[1])
        assert f"model/{path}/embedding.Sstack_d{dim}/.ATTRIBUTES/VARIABLE_VALUE" in keys
        for shard in range(2):
            emb = f"model/{path}/_dynamic_tables/user/shards/{shard}/emb/.ATTRIBUTES/VARIABLE_VALUE"
            assert emb in keys
    assert not [k for k in keys if "collection" in k]


def test_a_group_given_vectors_for_other_tables_is_refused(features):
    collection = EmbeddingCollection(features)
    group = collection.embeddings(["ad_id", "user_id"], "deep")
    batch = tiny_batch()[0]
    plan = group.dynamic_plan(batch)
    with pytest.raises(ValueError, match="deep: 1 dynamic tables, 2 vectors"):
        group.lookup(batch, resolved=(plan, [tf.zeros([1, 4]), tf.zeros([1, 4])]))
