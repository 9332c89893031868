"""The registry of feature kinds: a kind is one class, registered once, and the config
loader, schema check, transform and models ask it. A kind of this test's own
(``scaled_numeric``) goes through all of them; the config part imports without
TensorFlow.

Covers the base class and registry of kinds (``config/kinds/base.py``) and what a kind is
given (``config/kinds/context.py``). What each built-in kind does is in
tests/unit/features/test_transforms.py and test_sequences.py."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
from dataclasses import field
from typing import Literal

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.config.features import load_feature_config
from recsys_dist.config.kinds import (
    FEATURE_KINDS,
    ColumnRead,
    FeatureKind,
    register_kind,
    unregister_kind,
)
from recsys_dist.data.schema_check import required_columns
from recsys_dist.errors import ConfigError
from recsys_dist.features.transforms import FeatureTransform
from recsys_dist.models.embedding import FeatureEmbeddings, example_features
from tests.support.configs import changed, line_of, write_yaml
from tests.support.paths import REPO

FEATURES = {
    "tables": {"ads": {"rows": 100, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "price": {"kind": "scaled_numeric", "factor": 0.5},
        "age": {"kind": "numeric", "transform": "log1p"},
    },
    "labels": {"click": {}},
}


@pytest.fixture
def scaled_numeric():
    """Registers ``scaled_numeric`` (a float column times ``factor``, a dense input) for
    one test."""

    @register_kind("scaled_numeric")
    @dataclasses.dataclass(frozen=True)
    class ScaledNumeric(FeatureKind):
        """A float column times ``factor``, fed to the dense tower.

        Attributes:
          factor: What the value is multiplied by.
          column: Parquet column; defaults to ``name``.
        """

        name: str
        factor: float = field(metadata={"min": 0.0})
        kind: Literal["scaled_numeric"] = "scaled_numeric"
        column: str | None = None

        def column_reads(self, config):
            return [ColumnRead(config.column_of(self), "number", f"feature {self.name!r}")]

        @classmethod
        def transform_all(cls, features, context):
            return {
                f.name: tf.cast(context.raw[context.config.column_of(f)], tf.float32) * f.factor
                for f in features
            }

    yield ScaledNumeric
    unregister_kind("scaled_numeric")


def test_the_built_in_kinds_register_in_order():
    assert list(FEATURE_KINDS)[:5] == [
        "categorical",
        "numeric",
        "multi_categorical",
        "cross",
        "sequence",
    ]


def test_a_registered_kind_is_loaded_checked_and_transformed(tmp_path, scaled_numeric):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    assert config.features["price"] == scaled_numeric(name="price", factor=0.5)
    assert not config.features["price"].id_valued
    assert required_columns(config)["price"].needs == ("number",)
    transform = FeatureTransform(
        config,
        ["click"],
        {"ad": "int64", "price": "float64", "age": "float32", "click": "int64"},
        "fail",
    )
    raw = {
        "ad": tf.constant([3, 4], tf.int64),
        "price": tf.constant([2.0, -6.0], tf.float64),
        "age": tf.constant([0.0, 1.0]),
        "click": tf.constant([0, 1], tf.int64),
    }
    features, labels, valid = transform(raw, tf.constant("t"), tf.constant(0, tf.int64))
    assert list(features) == ["ad", "price", "age"]
    np.testing.assert_array_equal(features["price"].numpy(), [1.0, -3.0])
    np.testing.assert_array_equal(labels["click"].numpy(), [0.0, 1.0])
    np.testing.assert_array_equal(valid.numpy(), [1.0, 1.0])


def test_a_registered_kind_is_a_dense_input_of_the_models(tmp_path, scaled_numeric):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    batch = example_features(config, ["ad", "price"], batch_size=2)
    assert batch["price"].dtype == tf.float32 and batch["price"].shape == [2]
    embeddings = FeatureEmbeddings(config, ["ad", "price"])
    sparse, dense = embeddings(batch)
    assert list(sparse) == ["ad"] and dense.shape == [2, 1]


def test_a_misspelt_key_of_a_registered_kind_gets_a_suggestion(tmp_path, scaled_numeric):
    path = write_yaml(
        tmp_path / "f.yaml",
        changed(FEATURES, {"features.price": {"kind": "scaled_numeric", "facter": 0.5}}),
    )
    with pytest.raises(ConfigError) as raised:
        load_feature_config(path)
    line = line_of(pathlib.Path(path).read_text(), "facter")
    assert str(raised.value).startswith(f"{path}:{line}: features.price.facter: unknown key")
    assert str(raised.value).endswith('Did you mean "factor"?')


def test_an_unknown_kind_lists_the_registered_ones(tmp_path, scaled_numeric):
    path = write_yaml(
        tmp_path / "f.yaml",
        changed(FEATURES, {"features.price": {"kind": "scaled_numerics", "factor": 0.5}}),
    )
    with pytest.raises(
        ConfigError,
        match=r"features\.price\.kind: got 'scaled_numerics'; "
        r"expected one of 'categorical', .*'scaled_numeric'\. "
        r'Did you mean "scaled_numeric"\?',
    ):
        load_feature_config(path)


def test_an_unregistered_kind_takes_no_other_kind_path(tmp_path, scaled_numeric):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    unregister_kind("scaled_numeric")
    try:
        with pytest.raises(
            ValueError,
            match=r"feature 'price' has kind 'scaled_numeric' "
            r"\(.*ScaledNumeric\), which is not registered",
        ):
            FeatureTransform(
                config, [], {"ad": "int64", "price": "float64", "age": "float32"}, "fail"
            )
    finally:
        register_kind("scaled_numeric")(scaled_numeric)


def test_a_kind_name_is_registered_once(scaled_numeric):
    with pytest.raises(
        ValueError,
        match=r"feature kind 'scaled_numeric' is registered "
        r"already \(by .*ScaledNumeric\)",
    ):
        register_kind("scaled_numeric")(scaled_numeric)


def test_a_kind_without_its_transform_is_refused():
    with pytest.raises(
        TypeError,
        match=r"feature kind 'half' \(.*Half\) does not define "
        r"column_reads, transform_all",
    ):

        @register_kind("half")
        @dataclasses.dataclass(frozen=True)
        class Half(FeatureKind):
            name: str
            kind: Literal["half"] = "half"

    assert "half" not in FEATURE_KINDS


def test_a_kind_class_names_its_kind():
    with pytest.raises(
        TypeError,
        match=r"needs the fields name: str and "
        r"kind: Literal\['other'\] = 'other'",
    ):

        @register_kind("other")
        @dataclasses.dataclass(frozen=True)
        class Mislabelled(FeatureKind):
            name: str
            kind: Literal["mislabelled"] = "mislabelled"

            def column_reads(self, config):
                return []

            @classmethod
            def transform_all(cls, features, context):
                return {}

    with pytest.raises(TypeError, match=r"decorates a FeatureKind dataclass"):
        register_kind("plain")(type("Plain", (), {}))
    assert "other" not in FEATURE_KINDS and "plain" not in FEATURE_KINDS


def test_the_config_part_imports_without_tensorflow():
    code = (
        "import sys, recsys_dist.config.experiment, recsys_dist.config.features; "
        "assert 'tensorflow' not in sys.modules, 'the config part imported tensorflow'"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
