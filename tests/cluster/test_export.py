"""Exporting a model trained on a local cluster as a SavedModel that stock TensorFlow serves.

Two models are trained once (concurrently) with ``recsys-dist train`` on 2 workers + 2
parameter servers, their tables really sharded: a single-label DCN-v2 into a local model
dir and a two-label MMoE into an ``s3://`` one (moto's server). Each is exported, the MMoE
from its S3 checkpoint to ``s3://`` too; a fresh Python process that imports TensorFlow
but never ``recsys_dist`` loads the export (the S3 one downloaded first), serves raw
Parquet columns and must give the trained model's predictions. Bad requests, bad values
and unusable checkpoints are refused with clear messages. Covers
``export/saved_model.py``.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.configs import changed
from tests.support.paths import BIN
from tests.support.run_configs import ZOO_FEATURES, zoo_config
from tests.support.serving import ONLY_TENSORFLOW, serving_env

pytestmark = pytest.mark.cluster

MODELS = ("dcn_v2", "mmoe")
ROWS = 500

COLUMNS = {
    "I1": "float32",
    "I5": "float32",
    "C3": "int64",
    "C4": "int64",
    "C2": "int64",
    "C17": "int64",
    "C21": "string",
    "user_id": "int64",
    "tags": "list<int64>",
}
#: Rows of the nullable request that mark C3 and I1 as null.
NULL_ROWS = 5


def write_config(
    directory: pathlib.Path, data: pathlib.Path, model: str, features: dict = ZOO_FEATURES
) -> str:
    """The zoo's config of ``model``: one epoch on an in-process cluster."""
    return zoo_config(directory, data, model, epochs=1, mode="in_process", features=features)


#: The model trained into, and exported to, S3.
ON_S3 = "mmoe"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, s3_server):
    """model name -> (config path, model dir), both trained concurrently, each on an
    in-process cluster (the MMoE's model dir on S3)."""
    root = tmp_path_factory.mktemp("export")
    data = root / "data"
    synthesize(data, days=3, rows_per_day=6_000, seed=5, rows_per_file=3_000, row_groups_per_file=3)
    runs, processes = {}, {}
    for model in MODELS:
        config = write_config(root / model, data, model)
        model_dir = (
            f"s3://{s3_server['bucket']}/export-test/{model}/run"
            if model == ON_S3
            else root / model / "run"
        )
        runs[model] = (config, str(model_dir))
        processes[model] = subprocess.Popen(
            [
                str(BIN / "recsys-dist"),
                "train",
                "--config",
                config,
                "--model-dir",
                str(model_dir),
                "--no-eval",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for model, process in processes.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, f"{model}:\n{out[-2000:]}\n{err[-3000:]}"
    return {"root": root, "data": data, "runs": runs}


@pytest.fixture(scope="module")
def exported(trained, s3_server):
    """model name -> (ExportResult, local export directory, --out): the S3 export is
    downloaded into the local directory."""
    from recsys_dist import storage_io
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    out = {}
    for model, (config, model_dir) in trained["runs"].items():
        directory = trained["root"] / "exports" / model / "1"
        given = (
            f"s3://{s3_server['bucket']}/export-test/exports/{model}/1"
            if model == ON_S3
            else str(directory)
        )
        result = export_model(load_config(config), model_dir, given)
        if given != str(directory):
            storage_io.download_dir(given, str(directory))
        out[model] = (result, directory, given)
    return out


@pytest.fixture(scope="module")
def rows(trained):
    """The first ROWS rows of the eval day: a pyarrow table (features and labels)."""
    path = sorted((trained["data"] / "dt=2026-01-03").glob("*.parquet"))[0]
    return pq.read_table(path).slice(0, ROWS)


def raw_arrays(table) -> dict[str, np.ndarray]:
    """The serving request for ``table``'s rows: a numpy array per input (strings as
    unicode; a list column padded to [N, L] plus ``<column>_lengths``)."""
    out = {}
    for column, dtype in COLUMNS.items():
        if dtype.startswith("list<"):
            lists = table[column].to_pylist()
            width = max(1, max(len(v) for v in lists))
            out[column] = np.array([v + [0] * (width - len(v)) for v in lists], np.int64)
            out[column + "_lengths"] = np.array([len(v) for v in lists], np.int64)
            continue
        values = table[column].to_numpy(zero_copy_only=False)
        out[column] = values.astype(str) if dtype == "string" else values.astype(dtype)
    return out


def reference_predictions(
    config_path: str, model_dir: str, table, nulls: bool = False
) -> dict[str, np.ndarray]:
    """What the trained model predicts: built without a strategy, the same checkpoint
    (with ``nulls``, C3 and I1 of the first NULL_ROWS rows read as nulls)."""
    import tensorflow as tf

    from recsys_dist.checkpoint.store import CheckpointManager, local_prefix
    from recsys_dist.config import load_config
    from recsys_dist.features.transforms import FeatureTransform
    from recsys_dist.models.zoo import build_from_config

    config = load_config(config_path)
    saved = CheckpointManager(model_dir).latest()
    model = build_from_config(config)
    with local_prefix(saved) as prefix:  # downloaded from S3 for the MMoE
        tf.train.Checkpoint(model=model).read(prefix).expect_partial()
    dtypes = dict(COLUMNS, click="int64", conversion="int64")
    names = list(dict.fromkeys(n for group in config.inputs.values() for n in group))
    transform = FeatureTransform(config.features, config.labels, dtypes, "fail", names)
    raw = {
        c: tf.ragged.constant(table[c].to_pylist(), tf.int64, row_splits_dtype=tf.int64)
        if d.startswith("list<")
        else tf.constant(
            table[c].to_numpy(zero_copy_only=False).astype(object if d == "string" else d),
            tf.as_dtype(d),
        )
        for c, d in dtypes.items()
    }
    present = {}
    if nulls:
        valid_rows = np.arange(table.num_rows) >= NULL_ROWS
        present = {"C3": tf.constant(valid_rows), "I1": tf.constant(valid_rows)}
    features, _, valid = transform(raw, tf.constant("test"), tf.constant(0, tf.int64), present)
    assert float(tf.reduce_min(valid)) == 1.0
    logits = model(features, training=False)
    return {label: tf.sigmoid(logits[label]).numpy() for label in config.labels}


SERVE_SCRIPT = (
    ONLY_TENSORFLOW
    + r"""
import json
import numpy as np
import tensorflow as tf

exports, rows_file, out_file = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
NULL_ROWS = int(sys.argv[4])
rows = dict(np.load(rows_file))
result = {"predictions": {}, "errors": {}}

def error(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001  the message is what the test checks
        return f"{type(exc).__name__}: {exc}"
    return None

for model, directory in exports.items():
    loaded = tf.saved_model.load(directory)
    serve = loaded.signatures["serving_default"]
    out = serve(**{c: tf.constant(v) for c, v in rows.items()})
    result["predictions"][model] = {k: v.numpy().tolist() for k, v in out.items()}
    if model != "dcn_v2":
        continue
    good = {c: tf.constant(v) for c, v in rows.items()}
    nullable = loaded.signatures["serving_nullable"]
    scalar = [c for c in nullable.structured_input_signature[1]
              if not c.endswith(("_valid", "_lengths")) and c + "_lengths" not in rows]
    flags = {f"{c}_valid": tf.ones([len(rows["C3"])], tf.bool) for c in scalar}
    result["nullable_all_valid"] = {
        k: v.numpy().tolist() for k, v in nullable(**good, **flags).items()}
    some_null = np.arange(len(rows["C3"])) >= NULL_ROWS
    flags.update(C3_valid=tf.constant(some_null), I1_valid=tf.constant(some_null))
    result["nullable_with_nulls"] = {
        k: v.numpy().tolist() for k, v in nullable(**good, **flags).items()}
    missing = {c: v for c, v in good.items() if c != "C21"}
    int_as_float = dict(good, C3=tf.constant(rows["C3"].astype(np.float64)))
    string_as_int = dict(good, C21=tf.constant(np.arange(len(rows["C21"]))))
    infinite = rows["I1"].copy()
    infinite[7] = np.inf
    result["errors"] = {
        "missing": error(lambda: serve(**missing)),
        "int_as_float": error(lambda: serve(**int_as_float)),
        "string_as_int": error(lambda: serve(**string_as_int)),
        "serve_fn_int_as_float": error(lambda: loaded.serve(int_as_float)),
        "serve_fn_missing": error(lambda: loaded.serve(missing)),
        "infinite": error(lambda: serve(**dict(good, I1=tf.constant(infinite)))),
    }
result["recsys_dist_imported"] = "recsys_dist" in sys.modules
result["tf_keras_imported"] = "tf_keras" in sys.modules
with open(out_file, "w") as handle:
    json.dump(result, handle)
"""
)


@pytest.fixture(scope="module")
def served(exported, rows, tmp_path_factory):
    """Serves every export in one fresh process that imports TensorFlow, not recsys_dist."""
    work = tmp_path_factory.mktemp("serve")
    np.savez(work / "rows.npz", **raw_arrays(rows))
    (work / "serve.py").write_text(SERVE_SCRIPT)
    exports = {model: str(directory) for model, (_, directory, _) in exported.items()}
    result = subprocess.run(
        [
            sys.executable,
            "serve.py",
            json.dumps(exports),
            "rows.npz",
            "result.json",
            str(NULL_ROWS),
        ],
        cwd=work,
        env=serving_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((work / "result.json").read_text())


# ---- the export ------------------------------------------------------------------------
def test_export_result_and_info(trained, exported):
    from recsys_dist.checkpoint.store import CheckpointManager

    for model, (result, directory, given) in exported.items():
        saved = CheckpointManager(trained["runs"][model][1]).latest()
        labels = ["click", "conversion"] if model == "mmoe" else ["click"]
        assert result.out_dir == given
        assert (result.step, result.checkpoint) == (saved.step, saved.directory)
        assert result.inputs == COLUMNS == saved.state["feature_columns"]
        assert result.outputs == labels
        assert (directory / "saved_model.pb").is_file()
        assert (directory / "variables" / "variables.index").is_file()
        assert not (directory / "keras_metadata.pb").exists()
        info = json.loads((directory / "assets.extra" / "export.json").read_text())
        assert info["checkpoint"] == saved.directory and info["step"] == saved.step
        assert info["config"] == trained["runs"][model][0] and info["model"] == model
        assert info["labels"] == labels and info["inputs"] == COLUMNS
        # saved via a temporary sibling that is gone now
        assert [p.name for p in directory.parent.iterdir()] == ["1"]


def test_export_holds_the_table_stack_as_one_plain_variable(exported):
    import collections

    import tensorflow as tf

    # In training the stack of the 4 tables of dim 8 (4000 + 300 + 500 + 2000 rows) was
    # split over both parameter servers.
    reader = tf.train.load_checkpoint(str(exported["dcn_v2"][1] / "variables" / "variables"))
    shapes = collections.Counter(
        tuple(shape)
        for key, shape in reader.get_variable_to_shape_map().items()
        if key.endswith("VARIABLE_VALUE") and shape[0] >= 300
    )
    assert shapes == {(6800, 8): 1}, shapes


# ---- serving in a process without recsys_dist ---------------------------------------------
@pytest.mark.parametrize("model", list(MODELS))
def test_served_predictions_match_the_trained_model(trained, served, rows, model):
    assert served["recsys_dist_imported"] is False
    config, model_dir = trained["runs"][model]
    expected = reference_predictions(config, model_dir, rows)
    got = served["predictions"][model]
    assert sorted(got) == sorted(expected)
    for label, values in expected.items():
        assert values.shape == (ROWS,)
        np.testing.assert_allclose(np.asarray(got[label], np.float32), values, atol=1e-5)
        assert 0.0 < values.min() and values.max() < 1.0 and values.std() > 1e-3


def test_nullable_signature_reads_nulls_as_training_does(trained, served, rows):
    config, model_dir = trained["runs"]["dcn_v2"]
    for key, nulls in (("nullable_all_valid", False), ("nullable_with_nulls", True)):
        expected = reference_predictions(config, model_dir, rows, nulls=nulls)["click"]
        np.testing.assert_allclose(
            np.asarray(served[key]["click"], np.float32), expected, atol=1e-5
        )
    with_nulls = np.asarray(served["nullable_with_nulls"]["click"])
    all_valid = np.asarray(served["nullable_all_valid"]["click"])
    assert np.all(with_nulls[NULL_ROWS:] == all_valid[NULL_ROWS:])
    assert np.all(with_nulls[:NULL_ROWS] != all_valid[:NULL_ROWS])  # the nulls changed them


def test_saved_model_cli_lists_raw_columns_and_labels(exported):
    directory = exported["mmoe"][1]
    result = subprocess.run(
        [
            str(BIN / "saved_model_cli"),
            "show",
            "--dir",
            str(directory),
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
        ],
        env=serving_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    pattern = (
        r"(inputs|outputs)\['([^']+)'\] tensor_info:\s+dtype: (DT_\w+)\s+"
        r"shape: \(([-\d, ]+)\)"
    )
    found = {(kind, name): (dtype, shape) for kind, name, dtype, shape in re.findall(pattern, text)}
    tf_names = {"float32": "DT_FLOAT", "int64": "DT_INT64", "string": "DT_STRING"}
    expected = {
        ("inputs", c): (tf_names[d], "-1") for c, d in COLUMNS.items() if not d.startswith("list<")
    }
    expected.update(
        {("inputs", "tags"): ("DT_INT64", "-1, -1"), ("inputs", "tags_lengths"): ("DT_INT64", "-1")}
    )
    expected.update({("outputs", label): ("DT_FLOAT", "-1") for label in ("click", "conversion")})
    assert found == expected, text
    assert "Method name is: tensorflow/serving/predict" in text


def test_request_missing_a_feature_is_refused_naming_it(served):
    errors = served["errors"]
    assert "missing a required argument: 'C21'" in errors["missing"], errors["missing"]
    assert "C21" in errors["serve_fn_missing"], errors["serve_fn_missing"]


def test_request_with_a_wrong_dtype_is_refused(served):
    errors = served["errors"]
    # The signature checks each input's dtype against its TensorSpec.
    assert re.search(
        r"expected to be a int64 tensor but is a double tensor", errors["int_as_float"]
    ), errors["int_as_float"]
    assert re.search(
        r"expected to be a string tensor but is a int(32|64) tensor", errors["string_as_int"]
    ), errors["string_as_int"]
    # The module's `serve` function names the column too.
    assert (
        "dtype=tf.float64, name='C3') to TensorSpec(shape=(None,), dtype=tf.int64, name='C3')"
    ) in errors["serve_fn_int_as_float"], errors["serve_fn_int_as_float"]


def test_bad_value_in_a_request_raises_the_transform_error(served):
    message = served["errors"]["infinite"].replace("\\'", "'")  # TF escapes quotes
    assert (
        "numeric column 'I1' (feature 'I1') has an infinite value in the serving request at row 7"
    ) in message, message


# ---- refusals ---------------------------------------------------------------------------
def test_export_refuses_a_checkpoint_of_other_table_sizes(trained, tmp_path):
    from recsys_dist.checkpoint.store import CheckpointError
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    config = write_config(
        tmp_path / "other",
        trained["data"],
        "dcn_v2",
        changed(ZOO_FEATURES, {"tables.big.rows": 5000}),
    )
    with pytest.raises(CheckpointError) as info:
        export_model(load_config(config), trained["runs"]["dcn_v2"][1], str(tmp_path / "out"))
    message = str(info.value)
    assert "written for a different feature or model config" in message
    assert "table 'big' is 4000 x 8 in the checkpoint but 5000 x 8 in" in message, message
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_checkpoint_of_other_model_params(trained, tmp_path):
    from recsys_dist.checkpoint.store import CheckpointError
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    config, model_dir = trained["runs"]["dcn_v2"]
    with pytest.raises(CheckpointError) as info:
        export_model(
            load_config(config, ["model.params.hidden_units=[64, 16]"]),
            model_dir,
            str(tmp_path / "out"),
        )
    message = str(info.value)
    assert "does not fit the model of" in message, message
    # weights are named by their checkpoint key, with both shapes
    assert "model/deep/stack/0/kernel is [66, " in message, message
    assert "[66, 64] in the model" in message, message


def test_export_refuses_a_model_dir_without_a_checkpoint(trained, tmp_path):
    from recsys_dist.checkpoint.store import CheckpointError
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    empty = tmp_path / "never_trained"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no complete checkpoint") as info:
        export_model(load_config(trained["runs"]["dcn_v2"][0]), str(empty), str(tmp_path / "out"))
    assert str(empty) in str(info.value)


def test_export_refuses_an_incomplete_checkpoint(trained, tmp_path):
    from recsys_dist.checkpoint.store import CheckpointError, CheckpointManager
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    config, model_dir = trained["runs"]["dcn_v2"]
    saved = CheckpointManager(model_dir).latest()
    torn = tmp_path / "checkpoints" / pathlib.Path(saved.directory).name
    shutil.copytree(saved.directory, torn)
    (torn / "_COMPLETE").unlink()
    for given in (str(torn), str(torn / "variables")):
        with pytest.raises(CheckpointError, match="no _COMPLETE marker") as info:
            export_model(load_config(config), model_dir, str(tmp_path / "out"), checkpoint=given)
        assert str(torn) in str(info.value)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        export_model(
            load_config(config),
            model_dir,
            str(tmp_path / "out"),
            checkpoint=str(tmp_path / "nowhere" / "ckpt-000000000001"),
        )


def test_explicit_checkpoint_directory_or_prefix_is_found(trained):
    from recsys_dist.checkpoint.store import CheckpointManager
    from recsys_dist.export.saved_model import find_checkpoint

    model_dir = trained["runs"]["dcn_v2"][1]
    latest = CheckpointManager(model_dir).latest()
    for given in (latest.directory, latest.directory + "/", latest.prefix):
        found = find_checkpoint(model_dir, given)
        assert (found.directory, found.step, found.state) == (
            latest.directory,
            latest.step,
            latest.state,
        )


def test_export_refuses_a_non_empty_out_dir(trained, exported):
    from recsys_dist.config import load_config
    from recsys_dist.export import ExportError, export_model

    config, model_dir = trained["runs"]["dcn_v2"]
    directory = exported["dcn_v2"][1]
    with pytest.raises(ExportError, match="exists and is not empty") as info:
        export_model(load_config(config), model_dir, str(directory))
    assert str(directory) in str(info.value)


def test_export_from_and_to_s3(trained, exported, s3_server):
    """The S3 export: uploaded from a local staging directory, nothing else beside it;
    it describes the S3 checkpoint it came from; a non-empty S3 out or a missing bucket
    exits 2 naming the path."""
    from recsys_dist.checkpoint.store import CheckpointManager

    config, model_dir = trained["runs"][ON_S3]
    result, directory, given = exported[ON_S3]
    listing = s3_server["client"].list_objects_v2(
        Bucket=s3_server["bucket"], Prefix=f"export-test/exports/{ON_S3}/"
    )
    keys = {o["Key"].split(f"/{ON_S3}/", 1)[1] for o in listing["Contents"]}
    assert {
        "1/saved_model.pb",
        "1/variables/variables.index",
        "1/fingerprint.pb",
        "1/assets.extra/export.json",
    } <= keys and all(k.startswith("1/") for k in keys)
    assert {
        f"1/{p.relative_to(directory).as_posix()}" for p in directory.rglob("*") if p.is_file()
    } == keys  # the download is the whole export
    saved = CheckpointManager(model_dir).latest()
    assert saved.directory.startswith(f"{model_dir}/checkpoints/ckpt-")
    info = json.loads((directory / "assets.extra" / "export.json").read_text())
    assert (result.out_dir, result.checkpoint) == (given, saved.directory)
    assert (info["checkpoint"], info["step"], info["model_dir"]) == (
        saved.directory,
        saved.step,
        model_dir,
    )
    command = [
        str(BIN / "recsys-dist"),
        "export",
        "--config",
        config,
        "--model-dir",
        model_dir,
        "--out",
    ]
    again = command_forks.run([*command, given], capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert f"error: {given}: exists and is not empty" in again.stderr
    missing = "s3://no-such-bucket-export/1"
    nowhere = command_forks.run([*command, missing], capture_output=True, text=True, timeout=300)
    assert nowhere.returncode == 2 and "Traceback" not in nowhere.stderr, nowhere.stderr[-2000:]
    assert (
        f"error: {missing}: cannot write the export there: The specified bucket does not exist"
    ) in nowhere.stderr


def test_export_without_config_reads_the_runs_own(trained, tmp_path):
    _, model_dir = trained["runs"]["dcn_v2"]
    out = tmp_path / "1"
    result = subprocess.run(
        [str(BIN / "recsys-dist"), "export", "--model-dir", model_dir, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((out / "assets.extra" / "export.json").read_text())["model_dir"] == model_dir
