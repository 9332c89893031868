"""The registry of feature kinds: a kind is one class, registered once, and the config
loader, schema check, transform and models ask it. A kind of this test's own
(``scaled_numeric``) goes through all of them; kinds of this test's own show that the
transform runs each kind after the kinds it depends on (``depends_on``), whatever the
order of registration; the config part imports without TensorFlow.

Covers the base class and registry of kinds (``features/kinds/base.py``) and what a kind is
given (``features/kinds/context.py``). What each built-in kind does is in
tests/unit/features/test_transforms.py and test_sequences.py."""

from __future__ import annotations

import ast
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

from recsys_dist.data.schema_check import required_columns
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import load_feature_config
from recsys_dist.features.kinds import (
    FEATURE_KINDS,
    ColumnRead,
    FeatureKind,
    register_kind,
    unregister_kind,
)
from recsys_dist.features.transforms import FeatureTransform, group_by_kind
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


def test_the_built_in_kinds_are_registered():
    assert {"categorical", "numeric", "multi_categorical", "cross", "sequence"} <= set(
        FEATURE_KINDS
    )


def test_every_kind_module_of_the_package_is_registered():
    """A new kind is its module alone: the package imports each of its modules, so no
    list names it."""
    kinds = REPO / "recsys_dist" / "features" / "kinds"
    declared = {
        decorator.args[0].value
        for path in kinds.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call)
        and getattr(decorator.func, "id", None) == "register_kind"
    }
    assert len(declared) >= 5 and declared <= set(FEATURE_KINDS)


def test_a_cross_is_transformed_after_its_categorical_inputs(tmp_path):
    """The cross comes first in the file and in the registry; it reuses the integer hashes
    of its inputs, so the categorical kind runs first."""
    features = {
        "tables": {"ads": {"rows": 100, "dim": 4}, "cross": {"rows": 50, "dim": 4}},
        "features": {
            "ad_x_site": {"kind": "cross", "inputs": ["ad", "site"], "table": "cross"},
            "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
            "site": {"kind": "categorical", "dtype": "int64", "table": "ads"},
            "age": {"kind": "numeric"},
        },
        "labels": {"click": {}},
    }
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", features))
    groups = group_by_kind(list(config.features.values()), config)
    assert list(groups) == ["categorical", "cross", "numeric"]
    assert [f.name for f in groups["categorical"]] == ["ad", "site"]


def test_a_kind_runs_after_the_kinds_its_features_depend_on(tmp_path):
    """``shifted`` is registered first and its feature comes first in the file; it depends
    on a ``plain`` feature, so ``plain`` runs first."""
    calls = []
    try:

        @register_kind("shifted")
        @dataclasses.dataclass(frozen=True)
        class Shifted(FeatureKind):
            """Another feature's value plus one, fed to the dense tower."""

            name: str
            of: str
            kind: Literal["shifted"] = "shifted"

            def depends_on(self):
                return (self.of,)

            def column_reads(self, config):
                return []

            @classmethod
            def transform_all(cls, features, context):
                calls.append("shifted")
                config = context.config
                return {
                    f.name: context.raw[config.column_of(config.features[f.of])] + 1.0
                    for f in features
                }

        @register_kind("plain")
        @dataclasses.dataclass(frozen=True)
        class Plain(FeatureKind):
            """A float column as it is."""

            name: str
            kind: Literal["plain"] = "plain"

            def column_reads(self, config):
                return [ColumnRead(config.column_of(self), "number", f"feature {self.name!r}")]

            @classmethod
            def transform_all(cls, features, context):
                calls.append("plain")
                return {f.name: context.raw[context.config.column_of(f)] for f in features}

        doc = {
            "features": {"up": {"kind": "shifted", "of": "x"}, "x": {"kind": "plain"}},
            "labels": {"click": {}},
        }
        config = load_feature_config(write_yaml(tmp_path / "f.yaml", doc))
        transform = FeatureTransform(config, [], {"x": "float32"}, "fail")
        features, _, _ = transform(
            {"x": tf.constant([1.0, 2.0])}, tf.constant("t"), tf.constant(0, tf.int64)
        )
    finally:
        for name in ("shifted", "plain"):
            if name in FEATURE_KINDS:
                unregister_kind(name)
    assert calls == ["plain", "shifted"]
    assert list(features) == ["up", "x"]
    np.testing.assert_array_equal(features["up"].numpy(), [2.0, 3.0])


class Follows(FeatureKind):
    """A kind of these tests: zeros, after the feature ``of``."""

    def depends_on(self):
        return (self.of,)

    def column_reads(self, config):
        return []

    @classmethod
    def transform_all(cls, features, context):
        return {f.name: tf.zeros([2]) for f in features}


@pytest.fixture
def ping_pong():
    """Registers ``ping`` and ``pong``, two kinds whose feature follows feature ``of``."""

    @register_kind("ping")
    @dataclasses.dataclass(frozen=True)
    class Ping(Follows):
        name: str
        of: str
        kind: Literal["ping"] = "ping"

    @register_kind("pong")
    @dataclasses.dataclass(frozen=True)
    class Pong(Follows):
        name: str
        of: str
        kind: Literal["pong"] = "pong"

    yield
    unregister_kind("ping")
    unregister_kind("pong")


def test_kinds_that_depend_on_each_other_are_refused_by_name(tmp_path, ping_pong):
    doc = {
        "features": {"a": {"kind": "ping", "of": "b"}, "b": {"kind": "pong", "of": "a"}},
        "labels": {"click": {}},
    }
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", doc))
    with pytest.raises(
        ValueError,
        match=r"feature kinds depend on each other in a cycle: "
        r"'ping' after 'pong' \(feature 'a' on 'b'\); 'pong' after 'ping' \(feature 'b' on 'a'\)",
    ):
        FeatureTransform(config, [], {}, "fail")


def test_a_dependency_the_config_does_not_define_is_refused_by_name(tmp_path, ping_pong):
    doc = {"features": {"a": {"kind": "ping", "of": "nowhere"}}, "labels": {"click": {}}}
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", doc))
    with pytest.raises(
        ValueError,
        match=r"feature 'a' \(kind 'ping'\) depends on 'nowhere', which the feature config "
        r"does not define; defined features: a",
    ):
        FeatureTransform(config, [], {}, "fail")


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
        "import sys, recsys_dist.config.experiment, recsys_dist.features.config; "
        "assert 'tensorflow' not in sys.modules, 'the config part imported tensorflow'"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
