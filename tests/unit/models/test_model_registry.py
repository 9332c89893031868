"""A model of one's own, added in one place: a params dataclass with ``@register_model`` and
a ``RankingModel`` bound to it with ``@zoo_model``, both defined inside the test. With no
other edit its config validates (its params too) and ``train_run`` trains it.

It trains under ``cluster.strategy: mirrored`` with one replica: synchronous, in this
process, no server started.
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
from recsys_dist.config.model_registry import MODEL_REGISTRY, register_model, unregister_model
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, derive_seed
from recsys_dist.models.embedding import FeatureEmbeddings
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import MODELS, RankingModel, build_model, zoo_model
from recsys_dist.models.zoo.ranking_model import concat_inputs, logit_head
from tests.support.configs import changed, write_yaml
from tests.support.data import write_parquet

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
    """Registers model ``toy_mlp`` and binds its class, as a module of one's own would;
    unregisters it afterwards so other tests see the built-in models only."""

    @register_model("toy_mlp", input_groups=("deep",))
    @dataclasses.dataclass(frozen=True)
    class ToyMLPParams:
        """A toy MLP over the embeddings and dense features, registered by a test.

        Attributes:
          hidden_units: Widths of the MLP.
        """

        hidden_units: list[int] = dataclasses.field(
            default_factory=lambda: [8], metadata={"min_items": 1, "item_min": 1}
        )

    @zoo_model(ToyMLPParams)
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
            self.embeddings = FeatureEmbeddings(
                features,
                inputs["deep"],
                name="embeddings",
                seed=derive_seed(seed, "embeddings"),
                tables=self.model_tables,
            )
            self.mlp = MLP(params.hidden_units, seed=derive_seed(seed, "mlp"), name="mlp")
            self.head = logit_head(len(labels), seed)

        def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
            x = concat_inputs(*self.embeddings(features, training=training))
            return self.head(self.mlp(x, training=training))

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
    assert MODELS["toy_mlp"] is model_class and model_class.model_name == "toy_mlp"
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


def test_a_registered_model_without_a_class_is_named_when_built(tiny):
    @register_model("toy_classless")
    @dataclasses.dataclass(frozen=True)
    class ClasslessParams:
        """A model registered in config whose class was never imported."""

    try:
        assert "toy_classless" not in MODELS
        with pytest.raises(
            ValueError,
            match=r"model 'toy_classless' is registered \(params "
            r".*ClasslessParams\) but has no model class: "
            r"import the module that defines its "
            r"RankingModel, decorated with "
            r"@zoo_model\(.*ClasslessParams\)",
        ):
            build_model("toy_classless", tiny, {"deep": list(tiny.features)}, ["click"])
    finally:
        unregister_model("toy_classless")


def test_zoo_model_needs_a_registered_params_class_and_a_ranking_model(toy_mlp):
    params_class, model_class = toy_mlp

    @dataclasses.dataclass(frozen=True)
    class Unregistered:
        pass

    with pytest.raises(
        ValueError,
        match=r"Unregistered is registered as no model; decorate "
        r"it with @register_model",
    ):
        zoo_model(Unregistered)
    with pytest.raises(TypeError, match=r"decorates a RankingModel subclass"):
        zoo_model(params_class)(object)
    with pytest.raises(
        ValueError,
        match=r"model 'toy_mlp' has a class already: "
        r".*ToyMLP",
    ):
        zoo_model(params_class)(type("Other", (RankingModel,), {}))
    assert MODELS["toy_mlp"] is model_class
