"""The config language: every shipped config loads, every rejection names path and fix.

The configs are built as data (``FEATURES``, ``MODEL`` and the changes of each case);
only what YAML text alone can hold (invalid YAML, a key given twice) is written as text.

Covers the model and training config (``config/experiment.py``, its sections in
``config/sections.py``) and the feature config (``features/config.py``); the typed
parsing under both is in test_yaml_schema.py, the YAML reading in test_yaml_loader.py.
"""

from __future__ import annotations

import pathlib

import pytest

from recsys_dist.cli import main
from recsys_dist.config import load_config
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import load_feature_config
from tests.support.configs import DELETE, changed, line_of, write_yaml
from tests.support.paths import REPO as ROOT

FEATURES = {
    "tables": {
        "ads": {"rows": 1000, "dim": 8},
        "tags": {"rows": 500, "dim": 4},
        "cross": {"rows": 100, "dim": 4},
    },
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "site": {"kind": "categorical", "dtype": "string", "table": "ads"},
        "price": {"kind": "numeric", "transform": "log1p"},
        "tags": {"kind": "multi_categorical", "table": "tags", "max_length": 4},
        "ad_x_site": {"kind": "cross", "inputs": ["ad", "site"], "table": "cross"},
    },
    "labels": {"click": {}, "conversion": {}},
}

MODEL = {
    "features": "features.yaml",
    "data": {
        "path": "/data",
        "train": {"dates": "2026-01-01..2026-01-03"},
        "eval": {"dates": "2026-01-04"},
    },
    "model": {"name": "dcn_v2"},
}


#: For the models whose tables share one dim (deepfm, dlrm).
ONE_DIM_FEATURES = changed(FEATURES, {"tables.ads.dim": 4})


def write(tmp_path: pathlib.Path, features: dict = FEATURES, model: dict = MODEL) -> str:
    write_yaml(tmp_path / "features.yaml", features)
    return write_yaml(tmp_path / "model.yaml", model)


def features_with(tmp_path, changes: dict) -> str:
    return write(tmp_path, changed(FEATURES, changes))


def model_with(tmp_path, changes: dict) -> str:
    return write(tmp_path, model=changed(MODEL, changes))


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert config.features.features and config.labels


@pytest.mark.parametrize("path", sorted((ROOT / "features").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_feature_config_loads(path):
    assert load_feature_config(path).tables


def test_valid_config_resolves_defaults(tmp_path):
    config = load_config(write(tmp_path))
    assert config.inputs == {"deep": ["ad", "site", "price", "tags", "ad_x_site"]}
    assert config.labels == ["click", "conversion"]
    assert config.features.rows_of(config.features.features["ad"]) == 1000
    assert config.input.batch_size == 512 and config.cluster.workers == 2
    # no validation split and no passes chosen: the window's last day chooses them
    assert [str(d) for d in config.data.train.date_range().days()] == [
        "2026-01-01",
        "2026-01-02",
    ]
    assert config.data.validation.dates == "2026-01-03" and config.data.validation_carved


def test_unknown_key_names_dotted_path_line_and_suggestion(tmp_path):
    path = features_with(
        tmp_path, {"features.tags.max_length": DELETE, "features.tags.max_lenght": 4}
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    line = line_of((tmp_path / "features.yaml").read_text(), "max_lenght")
    assert f"features.yaml:{line}: features.tags.max_lenght: unknown key" in message
    assert 'Did you mean "max_length"?' in message


def test_cli_wrong_key_exits_nonzero_with_path_and_suggestion(tmp_path, capsys):
    path = model_with(tmp_path, {"input": {"batch_sise": 64}})
    assert main(["validate", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "input.batch_sise: unknown key" in err and 'Did you mean "batch_size"?' in err
    assert "Traceback" not in err


FEATURE_REJECTIONS = [
    ({"tables.ads.dim": "8"}, r"tables\.ads\.dim: got '8' \(of type str\); expected an integer"),
    ({"tables.ads.dim": 0}, r"tables\.ads\.dim: got 0; expected a value >= 1"),
    (
        {"features.tags.combiner": "avg"},
        r"features\.tags\.combiner: got 'avg'; expected one of 'sum', 'mean', 'sqrtn'",
    ),
    (
        {"features.price.kind": "numerc"},
        r"features\.price\.kind: got 'numerc'.*Did you mean \"numeric\"\?",
    ),
    (
        {"features.ad.table": "adz"},
        r"features\.ad\.table: unknown table 'adz'.*Did you mean \"ads\"\?",
    ),
    ({"features.ad.dtype": DELETE}, r"features\.ad\.dtype: missing required key"),
    (
        {"features.ad_x_site.inputs": ["ad", "price"]},
        r"features\.ad_x_site\.inputs\[1\]: feature 'price' is numeric; a cross takes categorical",
    ),
    (
        {"features.ad_x_site.inputs": ["ad"]},
        r"features\.ad_x_site\.inputs: got 1 item\(s\); "
        r"expected at least 2",
    ),
    (
        {"features.price.transform": "bucketize"},
        r"features\.price: transform 'bucketize' needs 'boundaries'",
    ),
    (
        {
            "features.price.transform": "bucketize",
            "features.price.boundaries": [1, 1],
            "features.price.table": "cross",
        },
        r"features\.price\.boundaries: got \[1\.0, 1\.0\]; expected strictly increasing",
    ),
    (
        {"features.price.transform": "standardize", "features.price.mean": 1},
        r"features\.price: transform 'standardize' needs both 'mean' and 'std'",
    ),
    ({"features.price.mean": 1}, r"features\.price\.mean: only applies to transform 'standardize'"),
    (
        {"features.ad.hash_buckets": 5000},
        r"features\.ad: needs 5000 rows \(hash_buckets\) but table 'ads' has rows=1000",
    ),
    ({"labels": {}}, r"labels: no labels defined"),
    (
        {"labels.click": {"column": "price"}},
        r"labels\.click: label column 'price' is also read by feature 'price'",
    ),
    ({"tables.unused": {"rows": 1, "dim": 1}}, r"tables\.unused: is used by no feature"),
    (
        {"features.tags.separator": ""},
        r"features\.tags\.separator: got '' \(of type str\); expected a non-empty string",
    ),
    (
        {"features.tags.weight_separator": ""},
        r"features\.tags\.weight_separator: got ''.*expected a non-empty string",
    ),
    (
        {"features.ad.vocabulary": "missing.txt"},
        r"features\.ad\.vocabulary: cannot read vocabulary file .*missing\.txt",
    ),
]


@pytest.mark.parametrize(
    "changes,pattern",
    FEATURE_REJECTIONS,
    ids=[p.split(":")[0] + str(i) for i, (_, p) in enumerate(FEATURE_REJECTIONS)],
)
def test_feature_config_rejections(tmp_path, changes, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(features_with(tmp_path, changes))
    assert "features.yaml" in str(info.value)


def test_a_key_given_twice_is_rejected(tmp_path):
    """A key given twice exists only in YAML text (a dict holds each key once)."""
    write(tmp_path)
    (tmp_path / "features.yaml").write_text(
        "tables:\n"
        "  ads: {rows: 1000, dim: 8}\n"
        "features:\n"
        "  ad: {kind: categorical, dtype: int64, table: ads}\n"
        "  ad: {kind: categorical, dtype: int64, table: ads}\n"
        "labels:\n"
        "  click: {}\n"
    )
    with pytest.raises(ConfigError, match=r"features\.ad: duplicate key") as info:
        load_config(tmp_path / "model.yaml")
    assert "features.yaml" in str(info.value)


MODEL_REJECTIONS = [
    ({"model.name": "dcnv2"}, r"model\.name: got 'dcnv2'.*Did you mean \"dcn_v2\"\?"),
    (
        {"model.labels": ["clicks"]},
        r"model\.labels\[0\]: unknown label 'clicks'.*Did you mean \"click\"\?",
    ),
    (
        {"model.inputs": {"deep": ["ad", "site", "price", "tags"]}},
        r"feature 'ad_x_site' of .*features\.yaml is used by no model input",
    ),
    (
        {"model.inputs": {"deep": ["ad", "sight"]}},
        r"model\.inputs\.deep\[1\]: unknown feature 'sight'.*Did you mean \"site\"\?",
    ),
    (
        {"model.name": "wide_deep"},
        r"model\.inputs: model 'wide_deep' needs its input groups wide, deep",
    ),
    (
        {"model.name": "mmoe", "model.labels": ["click"]},
        r"model\.labels: model 'mmoe' is multi-task",
    ),
    (
        {"model.name": "din"},
        r"model\.yaml:\d+: model\.name: model 'din' reads a behaviour "
        r"sequence; its inputs hold no feature of kind: sequence",
    ),
    ({"model.name": "bst"}, r"model 'bst' reads a behaviour sequence"),
    ({"features": "nope.yaml"}, r"features: feature config '.*nope\.yaml' does not exist"),
    (
        {"data.train.dates": "2026-01-03..2026-01-01"},
        r"data\.train\.dates: got '2026-01-03\.\.2026-01-01'; the range ends before it starts",
    ),
    (
        {"data.train": {"dates": "2026-01-01", "glob": "*"}},
        r"data\.train: set exactly one of 'dates'",
    ),
    (
        {"data.on_bad_file": "ignore"},
        r"data\.on_bad_file: got 'ignore'; expected one of 'fail', 'skip'",
    ),
]


@pytest.mark.parametrize(
    "changes,pattern", MODEL_REJECTIONS, ids=[str(i) for i in range(len(MODEL_REJECTIONS))]
)
def test_model_config_rejections(tmp_path, changes, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(model_with(tmp_path, changes))


HISTORY = {"kind": "sequence", "table": "ads", "max_length": 3, "target": "ad"}
#: Changes of the feature config and of the model config, and the error: what a model's
#: constructor refuses among its inputs (a ValueError once the cluster has started, a
#: traceback of train, evaluate or export) is refused by the config check.
MODEL_INPUT_REJECTIONS = [
    (
        {},
        {"model.name": "deepfm"},
        r"model\.yaml:\d+: model\.name: model 'deepfm' needs one embedding dim for all its "
        r"tables; got 'ads' \(dim 8\), 'tags' \(dim 4\), 'cross' \(dim 4\)\. Give these "
        r"tables the same 'dim' in .*features\.yaml",
    ),
    (
        {"features.price": DELETE, "tables.ads.dim": 4},
        {"model.name": "dlrm"},
        r"model\.name: model 'dlrm' needs at least one dense numeric feature",
    ),
    (
        {"features.hist_ad": changed(HISTORY, {"target": DELETE})},
        {"model.name": "din"},
        r"model\.name: model 'din' compares sequence 'hist_ad' with its candidate: set "
        r"features\.hist_ad\.target in .*features\.yaml",
    ),
    (
        {"features.hist_ad": HISTORY},
        {"model.name": "bst", "model.params": {"num_heads": 3}},
        r"model\.params\.num_heads: model 'bst': a position of history 'hist_ad' has dim 8 "
        r"\(its sequences' dims summed\), which num_heads=3 does not divide",
    ),
    (
        {"features.hist_ad": HISTORY},
        {"model.name": "din", "model.params": {"search_by": "ad_id"}},
        r"model\.params\.search_by: model 'din': search_by 'ad_id' is not a sequence of a "
        r"history among the model's inputs; choose one of \['hist_ad'\]",
    ),
    (
        {
            "features": {"price": {"kind": "numeric", "transform": "log1p"}},
            "tables": {},
        },
        {"model.name": "deepfm"},
        r"model\.name: model 'deepfm' needs at least one id-valued feature \(categorical, "
        r"cross, multi_categorical, sequence or bucketized numeric\); got only \['price'\]",
    ),
    (
        {"features.hist_ad": HISTORY, "features.price": DELETE},
        {"model.name": "dlrm", "model.inputs": {"deep": ["ad", "site", "tags", "hist_ad"]}},
        r"model\.inputs: model 'dlrm' needs one embedding dim",
    ),
]


@pytest.mark.parametrize(
    "feature_changes,changes,pattern",
    MODEL_INPUT_REJECTIONS,
    ids=[c["model.name"] for _, c, _ in MODEL_INPUT_REJECTIONS],
)
def test_what_a_model_cannot_read_is_refused_with_the_key(
    tmp_path, feature_changes, changes, pattern
):
    features = changed(FEATURES, feature_changes)
    if "model.inputs" in changes:  # the cross is left out
        del features["features"]["ad_x_site"], features["tables"]["cross"]
    path = write(tmp_path, features, changed(MODEL, changes))
    with pytest.raises(ConfigError, match=pattern):
        load_config(path)
    assert main(["validate", "--config", path]) == 2


def test_models_take_the_inputs_their_constructors_take(tmp_path):
    """One dim and a dense feature for dlrm, a history with its target for din and bst
    with heads dividing its dim: accepted."""
    features = changed(
        ONE_DIM_FEATURES, {"features.hist_ad": HISTORY, "features.hist_ad.max_length": 2}
    )
    for model in ({"name": "dlrm"}, {"name": "din"}, {"name": "bst", "params": {"num_heads": 4}}):
        config = load_config(write(tmp_path, features, changed(MODEL, {"model": model})))
        assert config.model.name == model["name"]


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path)
    (tmp_path / "model.yaml").write_text("features: features.yaml\nmodel: {name: [\n")
    with pytest.raises(ConfigError, match=r"model\.yaml:3: invalid YAML"):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_set_overrides_are_validated(tmp_path):
    path = write(tmp_path)
    assert load_config(path, ["input.batch_size=64"]).input.batch_size == 64
    with pytest.raises(ConfigError, match=r"input\.batch_size: got -1; expected a value >= 1"):
        load_config(path, ["input.batch_size=-1"])
    with pytest.raises(ConfigError, match=r"--set 'oops': expected key\.path=value"):
        load_config(path, ["oops"])


def test_an_error_from_a_set_names_the_set_not_a_line_of_the_file(tmp_path):
    path = model_with(tmp_path, {"model.params": {"cross_layers": 2}})
    with pytest.raises(ConfigError) as raised:
        load_config(path, ["model.params.cross_layers=0"])
    assert str(raised.value) == (
        "--set model.params.cross_layers=0: model.params.cross_layers: got 0; expected a value >= 1"
    )
    with pytest.raises(ConfigError) as raised:  # a key the file does not have
        load_config(path, ["input.prefetch_batches=-3"])
    assert str(raised.value).startswith(
        "--set input.prefetch_batches=-3: input.prefetch_batches: got -3"
    )
    with pytest.raises(ConfigError) as raised:  # the file's own error keeps its line
        load_config(model_with(tmp_path, {"input": {"batch_size": 0}}))
    line = line_of(pathlib.Path(path).read_text(), "batch_size")
    assert str(raised.value).startswith(f"{path}:{line}: input.batch_size: got 0")


def test_an_invalid_date_is_a_config_error_in_the_file_in_a_set_and_from_code(tmp_path):
    """YAML's own date type would raise ValueError on 2026-13-45 (it did, with a traceback)."""
    expected = "data.train.dates: got '2026-13-45'; expected YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD"
    path = model_with(tmp_path, {"data.train.dates": "2026-13-45"})
    text = pathlib.Path(path).read_text()
    assert "{dates: 2026-13-45}" in text  # unquoted, as a person writes it
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == f"{path}:{line_of(text, '2026-13-45')}: {expected}"
    path = write(tmp_path)
    with pytest.raises(ConfigError) as raised:
        load_config(path, ["data.train={dates: 2026-13-45}"])
    assert str(raised.value) == f"--set data.train={{dates: 2026-13-45}}: {expected}"
    with pytest.raises(ConfigError) as raised:  # typed values from code name their source
        load_config(path, values={"data.train": {"dates": "2026-13-45"}}, source="retrain")
    assert str(raised.value) == f"retrain: data.train={{'dates': '2026-13-45'}}: {expected}"
    config = load_config(
        path,
        ["data.eval.dates=2026-01-05"],
        {"data.train": {"dates": "2026-01-02"}},
        source="retrain",
    )
    assert (config.data.train.dates, config.data.eval.dates) == ("2026-01-02", "2026-01-05")


def test_set_model_name_drops_the_params_of_the_files_model_with_a_note(tmp_path, caplog):
    path = write(
        tmp_path,
        ONE_DIM_FEATURES,
        changed(MODEL, {"model.params": {"cross_layers": 3, "deep_units": [32], "dropout": 0.1}}),
    )
    with caplog.at_level("INFO", logger="recsys_dist"):
        config = load_config(path, ["model.name=deepfm"])
    assert config.model.name == "deepfm" and config.model.params.dropout == 0.1
    assert caplog.messages == [
        f"note: --set model.name=deepfm: dropped model.params "
        f"cross_layers, deep_units of {path}, which deepfm does "
        "not take"
    ]
    config = load_config(path, ["model.name=deepfm", "model.params.dropout=0.2"])
    assert config.model.params.dropout == 0.2
    with pytest.raises(
        ConfigError,
        match=r"^--set model.params.cross_layers=2: "
        r"model\.params\.cross_layers: unknown key",
    ):
        load_config(path, ["model.name=deepfm", "model.params.cross_layers=2"])


def test_paths_in_a_file_are_relative_to_it_and_paths_from_set_to_the_cwd(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    write_yaml(tmp_path / "features" / "f.yaml", FEATURES)
    write_yaml(
        configs / "model.yaml",
        {
            "features": "../features/f.yaml",
            "data": {"path": "../data", "train": {"dates": "2026-01-01"}},
            "model": {"name": "lr"},
            "retrain": {"root": "../retrain"},
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(configs / "model.yaml")
    assert config.features.file == str(tmp_path / "features" / "f.yaml")
    assert config.data.path == str(tmp_path / "data")
    assert config.retrain.root == str(tmp_path / "retrain")
    assert config.raw["data"]["path"] == str(tmp_path / "data")  # the resolved config
    config = load_config(configs / "model.yaml", ["data.path=mine", "retrain.root=s3://b/r"])
    assert config.data.path == str(elsewhere / "mine")
    assert config.retrain.root == "s3://b/r"


def test_vocabulary_files(tmp_path):
    (tmp_path / "ads.txt").write_text("10\n20\n30\n")
    path = features_with(tmp_path, {"features.ad.vocabulary": "ads.txt"})
    config = load_config(path)
    assert config.features.vocabularies["ad"] == [10, 20, 30]
    assert config.features.rows_of(config.features.features["ad"]) == 5  # 3 + 1 oov + 1 missing
    (tmp_path / "ads.txt").write_text("10\nten\n")
    with pytest.raises(ConfigError, match=r"non-integer id .*dtype int64 needs one integer"):
        load_config(path)


TRAIN_REJECTIONS = [
    (
        "train.embedding_optimizer={name: adam, learning_rate: 0.01}",
        r"train\.embedding_optimizer\.name: got 'adam'; embedding tables take 'adagrad', 'ftrl' "
        r"or 'sgd'",
    ),
    (
        "train.dense_optimizer={name: sgd, learning_rate: 0.1, beta_1: 0.5}",
        r"train\.dense_optimizer\.beta_1: does not apply to optimizer 'sgd'",
    ),
    (
        "train.dense_optimizer={name: adamw, learning_rate: 0.1}",
        r"train\.dense_optimizer\.name: got 'adamw'.*Did you mean \"adam\"\?",
    ),
    ("train.steps_per_call=0", r"train\.steps_per_call: got 0; expected a value >= 1"),
    (
        "train.lr_decay_per_epoch=1.5",
        r"train\.lr_decay_per_epoch: got 1\.5; expected a value <= 1\.0",
    ),
    (
        "train.lr_decay_per_epoch=0",
        r"train\.lr_decay_per_epoch: got 0\.0; expected a value >= 0\.01",
    ),
    (
        "train.lr_scaling=quadratic",
        r"train\.lr_scaling: got 'quadratic'; expected one of 'none', "
        r"'linear', 'sqrt'",
    ),
    (
        "train.linear_optimizer={name: adam, learning_rate: 0.05}",
        r"train\.linear_optimizer\.name: got 'adam'; embedding tables take 'adagrad', 'ftrl' "
        r"or 'sgd'",
    ),
    (
        "train.linear_optimizer={name: sgd, learning_rate: 0.05, l2: 1.0}",
        r"train\.linear_optimizer\.l2: does not apply to optimizer 'sgd'",
    ),
    (
        "train.early_stopping={patience: 0}",
        r"train\.early_stopping\.patience: got 0; expected a "
        r"value >= 1",
    ),
    (
        "train.early_stopping={metric: gauc}",
        r"train\.early_stopping\.metric: got 'gauc'; "
        r"expected one of 'auc', 'logloss'",
    ),
    (
        "model.params={cross_layer: 2}",
        r"model\.params\.cross_layer: unknown key.*Did you mean \"cross_layers\"\?",
    ),
    (
        "model.params={hidden_units: [64, 0]}",
        r"model\.params\.hidden_units\[1\]: got 0; expected a value >= 1",
    ),
]


@pytest.mark.parametrize(
    "override,pattern",
    TRAIN_REJECTIONS,
    ids=[o.split("=")[0] + str(i) for i, (o, _) in enumerate(TRAIN_REJECTIONS)],
)
def test_train_and_model_params_rejections(tmp_path, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(write(tmp_path), [override])


def test_early_stopping_needs_a_validation_split_it_can_score(tmp_path):
    short = model_with(tmp_path, {"data.train": {"dates": "2026-01-01..2026-01-02"}})
    with pytest.raises(
        ConfigError,
        match=r"train\.early_stopping: needs a validation split to score after every pass: "
        r"set data\.validation\.dates \(FROM\.\.TO\) or data\.validation\.glob, days apart "
        r"from data\.train and data\.eval \(a data\.train\.dates window of 3 or more days "
        r"gets its last tenth when data\.validation is left out\)",
    ):
        load_config(short, ["train.early_stopping={patience: 1}"])
    # a window long enough: its end is carved off for early stopping to score
    config = load_config(write(tmp_path), ["train.early_stopping={patience: 2}"])
    assert config.data.validation.dates == "2026-01-03"
    assert (config.train.epochs, config.train.early_stopping.patience) == (30, 2)


def test_early_stopping_needs_epochs_and_a_label_of_the_model(tmp_path):
    validation = "data.validation={dates: 2026-01-05}"
    with pytest.raises(
        ConfigError,
        match=r"train\.early_stopping: needs train\.epochs of at "
        r"least 2 \(got 1\): it stops between passes",
    ):
        load_config(
            write(tmp_path), [validation, "train.epochs=1", "train.early_stopping={patience: 1}"]
        )
    with pytest.raises(
        ConfigError,
        match=r"train\.early_stopping\.label: got 'clik'; the model "
        r"predicts click, conversion\. Did you mean",
    ):
        load_config(
            write(tmp_path), [validation, "train.epochs=3", "train.early_stopping={label: clik}"]
        )
    config = load_config(
        write(tmp_path), [validation, "train.epochs=3", "train.early_stopping={patience: 2}"]
    )
    assert config.train.early_stopping.patience == 2
    assert config.data.validation.dates == "2026-01-05"


def test_train_and_params_defaults(tmp_path):
    config = load_config(write(tmp_path))
    assert config.train.embedding_optimizer.name == "adagrad"
    assert config.train.dense_optimizer.name == "adam"
    assert type(config.model.params).__name__ == "DCNv2Params"
    assert config.model.params.cross_layers == 3


def test_the_resolved_config_loads_from_anywhere(tmp_path, monkeypatch):
    from recsys_dist.config.experiment import resolved_files

    (tmp_path / "ads.txt").write_text("10\n20\n30\n")
    path = features_with(tmp_path, {"features.ad.vocabulary": "ads.txt"})
    config = load_config(path, ["input.batch_size=64"])
    run = tmp_path / "elsewhere" / "run"
    run.mkdir(parents=True)
    for name, text in resolved_files(config).items():
        (run / name).write_text(text)
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = load_config(run / "config.yaml")
    assert again.input.batch_size == 64 and again.data.path == config.data.path
    assert again.features.vocabularies["ad"] == [10, 20, 30]


@pytest.mark.parametrize(
    "model,linear_features", [("lr", 5), ("deepfm", 5), ("wide_deep", 2), ("dcn_v2", None)]
)
def test_a_model_with_a_linear_part_gets_a_linear_optimizer_by_default(
    tmp_path, model, linear_features
):
    """Adagrad at min(0.5, 1/sqrt(F)) over the F features of the linear part, accumulator
    from 1e-4; written into the resolved config, which loads back the same."""
    import math

    from recsys_dist.config.experiment import resolved_files

    inputs = (
        {
            "model.inputs": {
                "wide": ["ad", "site"],
                "deep": ["ad", "site", "price", "tags", "ad_x_site"],
            }
        }
        if model == "wide_deep"
        else {}
    )
    features = ONE_DIM_FEATURES if model == "deepfm" else FEATURES
    config = load_config(write(tmp_path, features, changed(MODEL, {"model.name": model, **inputs})))
    spec = config.train.linear_optimizer
    if linear_features is None:
        assert spec is None and "linear_optimizer" not in config.raw.get("train", {})
        return
    assert (spec.name, spec.initial_accumulator_value) == ("adagrad", 1e-4)
    assert spec.learning_rate == pytest.approx(min(0.5, 1 / math.sqrt(linear_features)), abs=1e-4)
    assert config.train.embedding_optimizer.initial_accumulator_value == 1e-4
    (tmp_path / "run").mkdir()
    for name, text in resolved_files(config).items():
        (tmp_path / "run" / name).write_text(text)
    assert load_config(tmp_path / "run" / "config.yaml").train == config.train


def test_a_linear_optimizer_given_or_null_is_kept(tmp_path):
    given = load_config(
        model_with(tmp_path, {"model.name": "lr"}),
        ["train.linear_optimizer={name: ftrl, learning_rate: 0.3}"],
    )
    assert (given.train.linear_optimizer.name, given.train.linear_optimizer.learning_rate) == (
        "ftrl",
        0.3,
    )
    off = load_config(model_with(tmp_path, {"model.name": "lr"}), ["train.linear_optimizer=null"])
    assert off.train.linear_optimizer is None


@pytest.mark.parametrize(
    "overrides,epochs,stopping",
    [
        (["data.validation=null"], 1, False),  # no validation: one pass
        ([], 30, True),  # none given: the window's end is carved off and stops the run
        (["train.epochs=1"], 1, False),  # the passes chosen: nothing carved
        (["data.validation={dates: 2026-01-05}"], 30, True),  # validation: stop on it
        (["data.validation={dates: 2026-01-05}", "train.epochs=4"], 4, True),
        (["data.validation={dates: 2026-01-05}", "train.epochs=1"], 1, False),
        (["data.validation={dates: 2026-01-05}", "train.early_stopping=null"], 1, False),
        (["data.validation={dates: 2026-01-05}", "train.early_stopping={patience: 2}"], 30, True),
    ],
)
def test_early_stopping_is_on_by_default_with_a_validation_split(
    tmp_path, overrides, epochs, stopping
):
    from recsys_dist.config.sections import EarlyStoppingSpec

    config = load_config(write(tmp_path), overrides)
    assert config.train.epochs == epochs
    assert (config.train.early_stopping is not None) == stopping
    if stopping and "early_stopping" not in " ".join(overrides):
        assert config.train.early_stopping == EarlyStoppingSpec()
        assert config.raw["train"]["early_stopping"]["patience"] == 2
