"""The model registry: one ``register_model`` call per model, and everything derived from it
(the names ``model.name`` accepts, params classes, input groups, the label and sequence
checks of a config, the model list of docs/config.md). No TensorFlow here: a model's class
is named as ``"module:Class"`` and imported only when it is built."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from recsys_dist.config import load_config
from recsys_dist.config.experiment import MODEL_INPUT_GROUPS
from recsys_dist.config.model_params import MODEL_PARAMS
from recsys_dist.config.model_registry import (
    MODEL_REGISTRY,
    model_names,
    register_model,
    registered_model,
    registration_of,
    registration_of_class,
    unregister_model,
)
from recsys_dist.errors import ConfigError
from tests.support.configs import changed, line_of, write_yaml
from tests.support.paths import REPO

BUILT_IN = ["lr", "wide_deep", "deepfm", "dcn_v2", "dlrm", "mmoe"]

FEATURES = {
    "tables": {"ads": {"rows": 100, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "site": {"kind": "categorical", "dtype": "string", "table": "ads"},
        "price": {"kind": "numeric", "transform": "log1p"},
    },
    "labels": {"click": {}, "conversion": {}, "like": {}},
}


def _config(tmp_path: pathlib.Path, model: dict, features: dict = FEATURES) -> str:
    write_yaml(tmp_path / "features.yaml", features)
    return write_yaml(tmp_path / "model.yaml", {"features": "features.yaml", "model": model})


@pytest.fixture
def toy_models():
    """Registers models inside a test; unregisters them afterwards."""
    names: list[str] = []

    def register(name: str, **kwargs):
        @dataclasses.dataclass(frozen=True)
        class ToyParams:
            """A toy model of the tests.

            Attributes:
              width: A width.
            """

            width: int = dataclasses.field(default=8, metadata={"min": 1})

        kwargs.setdefault("model_class", f"tests.toy_models:{name}")
        register_model(name, params=ToyParams, **kwargs)
        names.append(name)
        return ToyParams

    yield register
    for name in names:
        if name in MODEL_REGISTRY:  # a test may have unregistered it itself
            unregister_model(name)


def test_the_built_in_models_are_registered_once_each():
    assert model_names()[: len(BUILT_IN)] == BUILT_IN
    assert MODEL_INPUT_GROUPS["wide_deep"] == ("wide", "deep")
    assert MODEL_INPUT_GROUPS["lr"] == ("wide",)
    assert MODEL_REGISTRY["mmoe"].min_labels == 2
    assert MODEL_REGISTRY["dcn_v2"].summary.startswith("DCN-v2 (Wang et al., 2021): ")
    assert MODEL_REGISTRY["dcn_v2"].model_class == "recsys_dist.models.zoo.dcn_v2:DCNv2"
    for name, params in MODEL_PARAMS.items():
        assert registration_of(params).name == name
        module, _, qualname = MODEL_REGISTRY[name].class_path.partition(":")
        assert module.startswith("recsys_dist.models.zoo.") and qualname


def test_a_class_is_found_by_its_path_without_importing_it():
    """A registration names its class by path; the class, once imported, finds its
    registration by the same path (``RankingModel.registration``)."""
    Toy = type("Toy", (), {"__module__": "tests.toy_models"})
    register_model("toy_path", params=MODEL_PARAMS["lr"], model_class="tests.toy_models:Toy")
    try:
        assert registration_of_class(Toy).name == "toy_path"
    finally:
        unregister_model("toy_path")
    with pytest.raises(ValueError, match=r"Toy is the class of no registered model; register"):
        registration_of_class(Toy)


def test_register_model_records_the_spec_and_the_views_follow(toy_models):
    params = toy_models("toy_reg", input_groups=["user", "item"], min_labels=2)
    spec = MODEL_REGISTRY["toy_reg"]
    assert (
        spec.name,
        spec.params,
        spec.model_class,
        spec.input_groups,
        spec.min_labels,
        spec.needs_sequence,
        spec.summary,
    ) == (
        "toy_reg",
        params,
        "tests.toy_models:toy_reg",
        ("user", "item"),
        2,
        False,
        "A toy model of the tests.",
    )
    assert MODEL_PARAMS["toy_reg"] is params and MODEL_INPUT_GROUPS["toy_reg"] == ("user", "item")
    assert "toy_reg" in MODEL_PARAMS and list(MODEL_PARAMS)[-1] == "toy_reg"
    unregister_model("toy_reg")
    assert "toy_reg" not in MODEL_PARAMS and "toy_reg" not in MODEL_INPUT_GROUPS


def test_register_model_rejects_a_second_model_of_one_name_and_a_non_dataclass(toy_models):
    with pytest.raises(
        ValueError,
        match=r"model 'dcn_v2' is registered already \(by "
        r"DCNv2Params\); choose another name",
    ):
        toy_models("dcn_v2")
    with pytest.raises(
        TypeError,
        match=r"register_model\('toy_plain'\): params must be a "
        r"dataclass",
    ):
        register_model("toy_plain", params=type("Plain", (), {}), model_class="a.b:C")
    with pytest.raises(
        TypeError,
        match=r"register_model\('toy_plain'\): model_class must be a class or "
        r"'package.module:Class'; got 'a.b.C'",
    ):
        toy_models("toy_plain", model_class="a.b.C")
    with pytest.raises(
        ValueError,
        match=r"register_model\('toy_twice'\): class recsys_dist.models.zoo.dcn_v2:DCNv2 "
        r"is model 'dcn_v2' already",
    ):
        toy_models("toy_twice", model_class="recsys_dist.models.zoo.dcn_v2:DCNv2")
    lr = MODEL_PARAMS["lr"]
    with pytest.raises(ValueError, match=r"distinct input groups"):
        register_model("toy_bad", params=lr, model_class="a:B", input_groups=("deep", "deep"))
    with pytest.raises(ValueError, match=r"min_labels >= 1"):
        register_model("toy_bad", params=lr, model_class="a:B", min_labels=0)
    assert all(n not in MODEL_REGISTRY for n in ("toy_plain", "toy_twice", "toy_bad"))


def test_an_unknown_model_name_lists_the_registered_ones_with_file_and_line(tmp_path):
    path = _config(tmp_path, {"name": "dcnv2"})
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    known = ", ".join(repr(n) for n in model_names())
    line = line_of(pathlib.Path(path).read_text(), "dcnv2")
    assert str(raised.value) == (
        f"{path}:{line}: model.name: got 'dcnv2'; expected one of {known}. Did you mean \"dcn_v2\"?"
    )
    with pytest.raises(ValueError, match=r"unknown model 'dcn'; expected one of 'lr', "):
        registered_model("dcn")


def test_a_registered_model_loads_and_its_params_are_checked(tmp_path, toy_models):
    params = toy_models("toy_cfg")
    config = load_config(_config(tmp_path, {"name": "toy_cfg", "params": {"width": 3}}))
    assert config.model.params == params(width=3) and config.inputs == {
        "deep": ["ad", "site", "price"]
    }
    with pytest.raises(
        ConfigError,
        match=r"model\.params\.widht: unknown key; allowed keys "
        r"are width\. Did you mean \"width\"\?",
    ):
        load_config(_config(tmp_path, {"name": "toy_cfg", "params": {"widht": 3}}))


def test_min_labels_is_checked_for_any_model(tmp_path, toy_models):
    toy_models("toy_three_tasks", min_labels=3)
    path = _config(tmp_path, {"name": "toy_three_tasks", "labels": ["click", "like"]})
    with pytest.raises(
        ConfigError,
        match=r"model\.labels: model 'toy_three_tasks' is "
        r"multi-task; it needs at least 3 labels, got "
        r"\['click', 'like'\]",
    ):
        load_config(path)
    assert load_config(_config(tmp_path, {"name": "toy_three_tasks"})).labels == [
        "click",
        "conversion",
        "like",
    ]


def test_a_model_that_needs_a_sequence_is_refused_inputs_without_one(tmp_path, toy_models):
    toy_models("toy_seq", input_groups=("user", "item"), needs_sequence=True)
    toy_models("toy_seq_one", needs_sequence=True)
    with pytest.raises(
        ConfigError,
        match=r"model\.name: model 'toy_seq_one' reads a behaviour "
        r"sequence; its inputs hold no feature of kind: "
        r"sequence \(features: ad, site, price\)",
    ):
        load_config(_config(tmp_path, {"name": "toy_seq_one"}))
    inputs = {"user": ["site", "price"], "item": ["ad"]}
    with pytest.raises(
        ConfigError,
        match=r"model\.inputs: model 'toy_seq' reads a behaviour "
        r"sequence; its inputs hold no feature of kind: "
        r"sequence \(features: site, price, ad\)",
    ):
        load_config(_config(tmp_path, {"name": "toy_seq", "inputs": inputs}))


def test_a_model_that_needs_a_sequence_takes_inputs_with_one(tmp_path, toy_models):
    toy_models("toy_seq", needs_sequence=True)
    features = changed(
        FEATURES,
        {"features.history": {"kind": "sequence", "table": "ads", "max_length": 5, "target": "ad"}},
    )
    config = load_config(_config(tmp_path, {"name": "toy_seq"}, features))
    assert "history" in config.inputs["deep"]


# ---- docs/config.md lists exactly the registered models --------------------------------

DOC = REPO / "docs" / "config.md"


def _model_sections() -> dict[str, str]:
    """``#### `name``` section text by model name, from the "### Models" section."""
    text = DOC.read_text()
    models = text.split("\n### Models\n", 1)[1].split("\n### ", 1)[0]
    parts = re.split(r"^#### `([^`]+)`\n", models, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_docs_list_every_registered_model_with_its_groups_and_params():
    sections = _model_sections()
    assert list(sections) == model_names()  # none missing, none unregistered, in order
    for name, spec in MODEL_REGISTRY.items():
        text = sections[name]
        assert spec.summary and spec.summary in text, name
        groups = ", ".join(f"`{g}`" for g in spec.input_groups)
        assert re.search(rf"^Input groups: {re.escape(groups)}[.,]", text, re.M), name
        assert ("Labels: at least {}.".format(spec.min_labels) in text) == (spec.min_labels > 1)
        assert ("kind: sequence" in text) == spec.needs_sequence, name
        rows = re.findall(r"^\| `([^`]+)` \|", text, re.M)
        assert rows == [f.name for f in dataclasses.fields(spec.params)], name
        assert ("Params: none." in text) == (not rows), name
