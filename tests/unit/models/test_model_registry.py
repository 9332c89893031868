"""A model of one's own, added in one place: a params dataclass, a ``RankingModel`` and one
``register_model`` call naming both, all defined inside the test. With no other edit its
config validates (its params and what it asks of its inputs too), ``build_model`` builds
it and ``train_run`` trains it; the same check of its inputs refuses a bad config in
``validate`` and a bad call of ``build_model``.

``train_run`` trains it under ``cluster.strategy: mirrored`` with one replica:
synchronous, in this process, no server started.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.config.experiment import load_config
from recsys_dist.config.model_inputs import InputProblem
from recsys_dist.config.model_params import ModelParams
from recsys_dist.config.model_registry import MODEL_REGISTRY, register_model, unregister_model
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, derive_seed
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import MODELS, RankingModel, build_model
from recsys_dist.models.zoo.ranking_model import concat_inputs, logit_head
from tests.support.configs import DELETE, changed, write_yaml
from tests.support.data import write_parquet
from tests.support.models import tiny_batch

FEATURES = {
    "tables": {"ads": {"rows": 64, "dim": 4}, "sites": {"rows": 16, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "site": {"kind": "categorical", "dtype": "string", "table": "sites"},
        "price": {"kind": "numeric", "transform": "log1p"},
    },
    "labels": {"click": {}},
}

DAY = "2026-01-01"

CONFIG = {
    "features": "features.yaml",
    # Scored on the day it trained on: the model's AUC on its own training data.
    "data": {"path": "data", "train": {"dates": DAY}, "eval": {"dates": DAY}},
    "input": {"batch_size": 64, "seed": 1},
    "model": {"name": "toy_mlp", "params": {"hidden_units": [16]}},
    "cluster": {"mode": "in_process", "workers": 1, "strategy": "mirrored"},
    "train": {
        "embedding_optimizer": {"name": "adagrad", "learning_rate": 0.2},
        "dense_optimizer": {"name": "adam", "learning_rate": 0.01},
        "epochs": 4,
        "steps_per_call": 5,
        "log_every_seconds": 1000,
        "summary_every_seconds": 1000,
        "checkpoint_every_seconds": None,
    },
}


@pytest.fixture
def toy_mlp():
    """Registers model ``toy_mlp`` as a module of one's own would: its params, its class and
    one registration; unregisters it afterwards so other tests see the built-in models
    only."""

    @dataclasses.dataclass(frozen=True)
    class ToyMLPParams(ModelParams):
        """A toy MLP over the embeddings and dense features, registered by a test.

        Attributes:
          hidden_units: Widths of the MLP.
        """

        hidden_units: list[int] = dataclasses.field(
            default_factory=lambda: [8], metadata={"min_items": 1, "item_min": 1}
        )

        def input_problem(
            self, model: str, features: FeatureConfig, inputs: dict[str, list[str]]
        ) -> InputProblem | None:
            """It reads at least two features (a check of the model's own)."""
            if len(inputs["deep"]) < 2:
                return InputProblem(f"model {model!r} reads at least two features")
            return None

    class ToyMLP(RankingModel):
        """``head(MLP(concat(embeddings, dense)))``."""

        def __init__(
            self,
            features: FeatureConfig,
            inputs: dict[str, list[str]],
            labels: list[str],
            params: ToyMLPParams | None = None,
            seed: int = 0,
            placement: Placement | None = None,
        ):
            super().__init__(features, inputs, labels, placement)
            params = params or ToyMLPParams()
            self.embeddings = self.embedding_collection.embeddings(
                inputs["deep"], "embeddings", seed=derive_seed(seed, "embeddings")
            )
            self.mlp = MLP(params.hidden_units, seed=derive_seed(seed, "mlp"), name="mlp")
            self.head = logit_head(len(labels), seed)

        def compute_logits(self, embedded, features: dict[str, Any], training: bool = False):
            x = concat_inputs(*embedded[self.embeddings])
            return self.head(self.mlp(x, training=training))

    register_model("toy_mlp", params=ToyMLPParams, model_class=ToyMLP, input_groups=("deep",))
    yield ToyMLPParams, ToyMLP
    unregister_model("toy_mlp")
    assert "toy_mlp" not in MODELS and "toy_mlp" not in MODEL_REGISTRY


def _write_config(tmp_path: pathlib.Path, changes: dict | None = None) -> str:
    write_yaml(tmp_path / "features.yaml", FEATURES)
    return write_yaml(tmp_path / "toy.yaml", changed(CONFIG, changes))


def _write_data(root: pathlib.Path, rows: int = 1536) -> None:
    """Clicks that depend on the ad (half the ads are good) and a little on the site."""
    rng = np.random.default_rng(0)
    ad = rng.integers(0, 60, rows)
    site = rng.integers(0, 10, rows)
    logit = np.where(ad % 2 == 0, 2.0, -2.0) + np.where(site < 5, 0.5, -0.5)
    click = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table(
        {
            "ad": pa.array(ad, pa.int64()),
            "site": pa.array([f"s{s}" for s in site], pa.string()),
            "price": pa.array(rng.lognormal(size=rows).astype(np.float32)),
            "click": pa.array(click, pa.int64()),
        }
    )
    write_parquet(root / f"dt={DAY}" / "part-0.parquet", table, row_group_size=512)


def test_a_registered_model_is_in_the_zoo_and_its_config_validates(tmp_path, toy_mlp):
    params_class, model_class = toy_mlp
    assert MODELS["toy_mlp"] is model_class and model_class.registration().name == "toy_mlp"
    config = load_config(_write_config(tmp_path))
    assert config.model.params == params_class(hidden_units=[16])
    assert config.inputs == {"deep": ["ad", "site", "price"]}
    with pytest.raises(
        ConfigError,
        match=r"model\.params\.hiden_units: unknown key; allowed "
        r"keys are hidden_units\. Did you mean "
        r"\"hidden_units\"\?",
    ):
        load_config(_write_config(tmp_path, {"model.params": {"hiden_units": [16]}}))
    with pytest.raises(
        ConfigError,
        match=r"model\.params\.hidden_units\[0\]: got 0; "
        r"expected a value >= 1",
    ):
        load_config(_write_config(tmp_path, {"model.params": {"hidden_units": [0]}}))
    with pytest.raises(
        ConfigError,
        match=r"model\.inputs\.wide: model 'toy_mlp' has no input "
        r"group 'wide'",
    ):
        load_config(_write_config(tmp_path, {"model.inputs": {"wide": ["ad"]}}))
    one = _write_config(tmp_path)
    write_yaml(
        tmp_path / "features.yaml",
        changed(FEATURES, {"features": {"ad": FEATURES["features"]["ad"]}, "tables.sites": DELETE}),
    )
    with pytest.raises(
        ConfigError,
        match=r"toy\.yaml:\d+: model\.name: model 'toy_mlp' reads at least two features",
    ):
        load_config(one)


def test_a_registered_model_builds_and_takes_a_training_step(tmp_path, toy_mlp, tiny):
    """Built by name in this process, it trains a step on a tiny batch; the check that
    ``validate`` runs refuses its bad inputs, and the schema its bad params."""
    params_class, model_class = toy_mlp
    inputs = {"deep": ["ad_id", "user_id", "price"]}
    model = build_model("toy_mlp", tiny, inputs, ["click"], params_class(hidden_units=[4]))
    assert isinstance(model, model_class) and model.name == "toy_mlp"
    model.create_variables()
    batch, labels = tiny_batch(16)
    optimizer = tf.keras.optimizers.legacy.Adagrad(0.5)
    before = [v.numpy() for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        logits = model(batch, training=True)["click"]
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(labels["click"], tf.float32), logits)
        )
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    assert logits.shape == (16,) and np.isfinite(float(loss))
    assert all(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables))
    with pytest.raises(ValueError, match=r"model 'toy_mlp' reads at least two features"):
        build_model("toy_mlp", tiny, {"deep": ["ad_id"]}, ["click"])
    with pytest.raises(ValueError, match=r"model 'toy_mlp' has no input group 'wide'"):
        build_model("toy_mlp", tiny, {"wide": ["ad_id"]}, ["click"])
    with pytest.raises(
        ValueError, match=r"ToyMLPParams\.hidden_units\[0\]: got 0; expected a value >= 1"
    ):
        params_class(hidden_units=[0])


def test_a_registered_model_trains_from_its_config(tmp_path, toy_mlp, caplog):
    from recsys_dist.train.run import train_run

    _write_data(tmp_path / "data")
    config = load_config(_write_config(tmp_path))
    with caplog.at_level("INFO", logger="recsys_dist"):
        outcome = train_run(config, str(tmp_path / "model"))
    output = "\n".join(caplog.messages)
    assert "model toy_mlp" in output
    assert outcome.step == 4 * 1536 // 64, output
    auc = outcome.metrics["labels"]["click"]["auc"]
    # A model that learnt nothing scores 0.5; this one reaches about 0.84.
    assert auc > 0.75, output


def test_a_registered_model_whose_class_does_not_import_is_named_when_built(tiny):
    @dataclasses.dataclass(frozen=True)
    class ClasslessParams:
        """A model registered in config whose class does not exist."""

    path = "recsys_dist.models.zoo.nowhere:Nothing"
    register_model("toy_classless", params=ClasslessParams, model_class=path)
    try:
        assert "toy_classless" in MODELS  # every registered model; its class imported on use
        with pytest.raises(
            ValueError,
            match=r"model 'toy_classless' names class "
            r"'recsys_dist\.models\.zoo\.nowhere:Nothing', which does not "
            r"import: No module named 'recsys_dist\.models\.zoo\.nowhere'",
        ):
            build_model("toy_classless", tiny, {"deep": list(tiny.features)}, ["click"])
    finally:
        unregister_model("toy_classless")


def test_a_model_class_is_a_registered_ranking_model(toy_mlp, tiny):
    params_class, model_class = toy_mlp

    class Unregistered(RankingModel):
        pass

    with pytest.raises(
        ValueError,
        match=r"Unregistered is the class of no registered model; register it "
        r"with register_model",
    ):
        Unregistered(tiny, {"deep": ["ad_id"]}, ["click"])
    register_model("toy_object", params=dataclasses.make_dataclass("P", []), model_class=object)
    try:
        with pytest.raises(TypeError, match=r"model 'toy_object': its model_class "):
            build_model("toy_object", tiny, {"deep": ["ad_id"]}, ["click"])
    finally:
        unregister_model("toy_object")
    with pytest.raises(ValueError, match=r"is model 'toy_mlp' already; a class is one model"):
        register_model("toy_again", params=params_class, model_class=model_class)
    assert MODELS["toy_mlp"] is model_class
