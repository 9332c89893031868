"""The one check of a model's inputs (``config/model_inputs.py``): each problem with the
config key ``validate`` names and the message ``build_model`` raises. The same problems
through ``load_config`` are in test_config.py and test_model_registry.py, through
``build_model`` in tests/unit/models/test_zoo.py."""

from __future__ import annotations

import dataclasses

import pytest

from recsys_dist.config.model_inputs import InputProblem, model_input_problem
from recsys_dist.config.model_registry import RegisteredModel
from recsys_dist.features.config import load_feature_config
from tests.support.configs import write_yaml

FEATURES = {
    "tables": {"ads": {"rows": 100, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "site": {"kind": "categorical", "dtype": "string", "table": "ads"},
        "price": {"kind": "numeric", "transform": "log1p"},
    },
    "labels": {"click": {}, "like": {}},
}


@dataclasses.dataclass(frozen=True)
class NoParams:
    """Params without a check of their own."""


@dataclasses.dataclass(frozen=True)
class NeedsPrice:
    """Params whose model reads ``price``."""

    def input_problem(self, model, features, inputs):
        if "price" not in inputs["deep"]:
            return InputProblem(f"model {model!r} reads price", "model.inputs.deep")
        return None


TWO_GROUPS = RegisteredModel("toy", NoParams, "a:B", ("wide", "deep"), min_labels=2)
SEQUENCE = RegisteredModel("toy_seq", NoParams, "a:C", ("deep",), needs_sequence=True)
GOOD = {"wide": ["ad"], "deep": ["site", "price"]}


@pytest.fixture
def features(tmp_path):
    return load_feature_config(write_yaml(tmp_path / "features.yaml", FEATURES))


@pytest.mark.parametrize(
    "inputs, labels, key, message",
    [
        (
            {"wide": ["ad"], "dep": ["site"]},
            ["click", "like"],
            "model.inputs.dep",
            "model 'toy' has no input group 'dep': it reads input group(s) wide, deep; got "
            "['dep', 'wide']. Did you mean \"deep\"?",
        ),
        (
            {"wide": ["ad"]},
            ["click", "like"],
            "model.inputs",
            "model 'toy' needs input group(s) deep: it reads input group(s) wide, deep; "
            "got ['wide']",
        ),
        (
            {"wide": ["ad"], "deep": []},
            ["click", "like"],
            "model.inputs.deep",
            "input group 'deep' lists no feature",
        ),
        (
            {"wide": ["ad"], "deep": ["site", "prize"]},
            ["click", "like"],
            "model.inputs.deep[1]",
            "unknown feature 'prize' (not in {file}). Did you mean \"price\"?",
        ),
        (
            {"wide": ["ad", "ad"], "deep": ["site"]},
            ["click", "like"],
            "model.inputs.wide",
            "lists feature(s) ['ad'] more than once",
        ),
        (GOOD, [], "model.labels", "a model needs at least one label; got none"),
        (
            GOOD,
            ["click", "lik"],
            "model.labels[1]",
            "unknown label 'lik'; {file} defines click, like. Did you mean \"like\"?",
        ),
        (
            GOOD,
            ["click", "click"],
            "model.labels",
            "labels ['click', 'click'] name a label more than once",
        ),
        (
            GOOD,
            ["click"],
            "model.labels",
            "model 'toy' is multi-task; it needs at least 2 labels, got ['click']",
        ),
    ],
)
def test_each_problem_names_its_key(features, inputs, labels, key, message):
    problem = model_input_problem(TWO_GROUPS, NoParams(), features, inputs, labels)
    assert problem == InputProblem(message.format(file=features.file), key)


def test_good_inputs_pass_and_the_params_check_comes_last(features):
    assert model_input_problem(TWO_GROUPS, NoParams(), features, GOOD, ["click", "like"]) is None
    one_group = dataclasses.replace(TWO_GROUPS, input_groups=("deep",), min_labels=1)
    assert model_input_problem(
        one_group, NeedsPrice(), features, {"deep": ["ad"]}, ["click"]
    ) == InputProblem("model 'toy' reads price", "model.inputs.deep")
    # a problem of the inputs themselves is named before the params are asked
    assert model_input_problem(
        one_group, NeedsPrice(), features, {"deep": ["ad"]}, ["clik"]
    ).key == ("model.labels[0]")


def test_a_model_that_needs_a_sequence(features, tmp_path):
    assert model_input_problem(
        SEQUENCE, NoParams(), features, {"deep": ["ad", "price"]}, ["click"]
    ) == InputProblem(
        "model 'toy_seq' reads a behaviour sequence; its inputs hold no feature of kind: "
        "sequence (features: ad, price)"
    )
    history = {"kind": "sequence", "table": "ads", "max_length": 3, "target": "ad"}
    doc = dict(FEATURES, features={**FEATURES["features"], "history": history})
    with_history = load_feature_config(write_yaml(tmp_path / "seq.yaml", doc))
    inputs = {"deep": ["ad", "history"]}
    assert model_input_problem(SEQUENCE, NoParams(), with_history, inputs, ["click"]) is None
