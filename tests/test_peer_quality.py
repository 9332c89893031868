"""benchmarks/peer_quality.py without a cluster: its input checks are `recsys-dist
validate`'s (same messages, exit codes, no traceback), it names the `bench` extra when a
peer is missing, and its one-hot encoding is exactly what our `lr` model reads."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist import cli
from recsys_dist.data.synth_files import synthesize

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "configs" / "demo.yaml")


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "peer_quality", ROOT / "benchmarks" / "peer_quality.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_quality"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


peer_quality = _load_benchmark()


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> pathlib.Path:
    """Two days of 400 synthetic rows."""
    root = tmp_path_factory.mktemp("peer") / "data"
    synthesize(root, days=2, rows_per_day=400, seed=3, rows_per_file=200, row_groups_per_file=2)
    return root


@pytest.fixture(scope="module")
def without_c5(tiny_data) -> pathlib.Path:
    """The same data without the column C5, which the demo's feature config reads."""
    root = tiny_data.parent / "without_c5"
    for path in tiny_data.rglob("*.parquet"):
        out = root / path.relative_to(tiny_data)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(path).drop_columns(["C5"]), out)
    return root


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("note: ")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _validate_error(capsys, data, train, eval_) -> tuple[int, str]:
    code = cli.main(
        [
            "validate",
            "--config",
            DEMO,
            "--set",
            f"data.path={data}",
            "--set",
            f"data.train={{dates: {train}}}",
            "--set",
            f"data.eval={{dates: {eval_}}}",
        ]
    )
    return code, _one_error_line(capsys)


@pytest.mark.parametrize("case", ["missing column", "empty window"])
def test_bad_input_fails_as_validate_does(case, tiny_data, without_c5, capsys):
    data, train, eval_ = {
        "missing column": (without_c5, "2026-01-01", "2026-01-02"),
        "empty window": (tiny_data, "2026-01-01", "2026-01-09"),
    }[case]
    expected_code, expected = _validate_error(capsys, data, train, eval_)
    code = peer_quality.main(
        ["--config", DEMO, "--data", str(data), "--train", train, "--eval", eval_, "--check"]
    )
    assert (code, _one_error_line(capsys)) == (expected_code, expected)
    assert code == 3
    if case == "missing column":
        assert "column 'C5' (read by feature 'C5') is missing" in expected
    else:
        assert "no Parquet files for dt=2026-01-09" in expected


def test_good_input_passes_the_check(tiny_data, capsys):
    code = peer_quality.main(
        [
            "--config",
            DEMO,
            "--data",
            str(tiny_data),
            "--train",
            "2026-01-01",
            "--eval",
            "2026-01-02",
            "--check",
        ]
    )
    assert code == 0
    assert "inputs OK" in capsys.readouterr().out


def test_missing_peer_names_the_bench_extra(monkeypatch, tiny_data, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "lightgbm" else real(name, *a)
    )
    code = peer_quality.main(
        [
            "--config",
            DEMO,
            "--data",
            str(tiny_data),
            "--train",
            "2026-01-01",
            "--eval",
            "2026-01-02",
        ]
    )
    line = _one_error_line(capsys)
    assert code != 0
    # without the bench extra (as in CI) the others are missing too
    missing = line.split("missing: ", 1)[1].split(". ", 1)[0].split(", ")
    assert "lightgbm" in missing and "pip install -e '.[bench]'" in line


def _hashed_demo(tmp_path) -> str:
    """configs/demo.yaml over its feature config with every dynamic table hashed."""
    import yaml

    features = yaml.safe_load((ROOT / "features" / "criteo_synth.yaml").read_text())
    for name, spec in features["tables"].items():
        if spec.get("kind") == "dynamic":
            features["tables"][name] = {"rows": 1000, "dim": spec["dim"]}
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(features))
    config = yaml.safe_load(pathlib.Path(DEMO).read_text())
    config["features"] = str(tmp_path / "features.yaml")
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(config))
    return str(tmp_path / "demo.yaml")


def test_one_hot_encoding_is_what_lr_reads(tiny_data, tmp_path):
    """The CSR of pyarrow rows through our transforms, times the weights of an `lr` model,
    equals that model's logits on the same rows read by the Parquet op (hashed tables)."""
    pytest.importorskip("scipy")
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.zoo import build_from_config

    overrides = [
        f"data.path={tiny_data}",
        "data.train={dates: 2026-01-01}",
        "data.eval={dates: 2026-01-02}",
        "model.name=lr",
    ]
    inputs = peer_quality.validate_inputs(_hashed_demo(tmp_path), overrides)
    config = inputs.config
    encoder = peer_quality.OneHotEncoder(config.features, config.inputs["wide"])
    split = peer_quality.read_split(inputs, "eval", encoder, [], lambda line: None)

    model = build_from_config(config)
    model.create_variables()
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    linear = model.linear
    weights = np.zeros(encoder.width)
    for table, stacked in linear.embeddings.tables.items():
        first = encoder.offsets[table]
        weights[first : first + stacked.rows] = stacked.numpy()[:, 0]
    assert linear.embeddings.dense_feature_names == encoder.dense
    weights[encoder.width - len(encoder.dense) :] = linear.dense.kernel.numpy()[:, 0]
    ours = split.one_hot @ weights + float(linear.bias.numpy()[0])

    pipeline = prepare_input(config, "eval", 1)
    rows, logits = [], []
    for batch in pipeline.local_dataset(training=False):
        rows.append(batch["row"].numpy())
        logits.append(model(batch["features"], training=False)["click"].numpy())
    order = np.argsort(np.concatenate(rows), kind="stable")
    expected = np.concatenate(logits)[order]
    assert len(ours) == len(expected) == 400
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
    assert np.any(expected != 0.0)


def test_a_dynamic_tables_ids_each_get_a_column_of_their_own(tiny_data):
    """``user`` is a dynamic table in the demo: each distinct user_id is one column, met
    in either window; both windows' matrices end with the same width."""
    pytest.importorskip("scipy")
    overrides = [
        f"data.path={tiny_data}",
        "data.train={dates: 2026-01-01}",
        "data.eval={dates: 2026-01-02}",
        "model.name=lr",
    ]
    inputs = peer_quality.validate_inputs(DEMO, overrides)
    config = inputs.config
    assert config.features.tables["user"].dynamic
    encoder = peer_quality.OneHotEncoder(config.features, ["user_id"])
    splits = [
        peer_quality.read_split(inputs, s, encoder, ["user_id"], lambda line: None)
        for s in ("eval", "train")
    ]
    users = [t.column("user_id").to_numpy() for split in splits for t in split.tables]
    users = np.concatenate(users)
    matrix = peer_quality.sp_vstack([encoder.widen(s.one_hot) for s in splits])
    assert matrix.shape == (len(users), encoder.width) == (len(users), len(set(users)))
    column = matrix.indices  # one id per row
    assert len(column) == len(users)
    assert len({(int(u), int(c)) for u, c in zip(users, column)}) == len(set(users))


@pytest.mark.parametrize(
    "text,expected", [("0-2", [0, 1, 2]), ("4,1,4", [4, 1]), ("0-1,7", [0, 1, 7])]
)
def test_seeds_are_read_as_lists_and_ranges(text, expected):
    args = peer_quality.parse_args(["--seeds", text])
    assert args.seeds == expected


@pytest.mark.parametrize("text", ["x", "3-1", "1,,2", "-1"])
def test_a_bad_seed_is_refused_naming_it(text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        peer_quality.parse_args(["--seeds", text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--seeds: " in err and "is not a seed" in err and "e.g. 0-6 or 0,3,5" in err


def test_seeded_runs_add_both_seeds_to_the_overrides(tiny_data):
    inputs = peer_quality.validate_inputs(
        DEMO,
        [
            f"data.path={tiny_data}",
            "data.train={dates: 2026-01-01}",
            "data.eval={dates: 2026-01-02}",
        ],
    )
    assert peer_quality.with_seed(inputs, None) is inputs
    seeded = peer_quality.with_seed(inputs, 5)
    assert seeded.overrides == [*inputs.overrides, "train.seed=5", "input.seed=5"]
    from recsys_dist.config import load_config

    config = load_config(DEMO, seeded.overrides)
    assert (config.train.seed, config.input.seed) == (5, 5)


def test_seeds_give_means_and_the_zoo_gap_seed_by_seed():
    Row = peer_quality.Row

    def row(method, kind, auc, seed):
        return Row(method, kind, auc, 0.5, auc + 0.1, 10.0, "s", seed=seed)

    runs = [
        row("dcn_v2 one process", "peer", 0.75, 0),
        row("dcn_v2 (zoo)", "zoo", 0.74, 0),
        row("lr (zoo)", "zoo", 0.70, 0),
        row("dcn_v2 one process", "peer", 0.76, 1),
        row("dcn_v2 (zoo)", "zoo", 0.77, 1),
        row("lr (zoo)", "zoo", 0.72, 1),
    ]
    assert peer_quality.seed_differences(runs) == {"dcn_v2": pytest.approx([-0.01, 0.01])}
    means = [
        peer_quality.mean_row([r for r in runs if r.method == m])
        for m in ("dcn_v2 one process", "dcn_v2 (zoo)", "lr (zoo)")
    ]
    assert [m.method for m in means] == [
        "dcn_v2 one process (mean of 2 seeds)",
        "dcn_v2 (zoo) (mean of 2 seeds)",
        "lr (zoo) (mean of 2 seeds)",
    ]
    assert means[1].auc == pytest.approx(0.755) and means[1].seconds == 20.0
    assert means[1].setting == ("s (seed 0); seeds 0, 1: AUC 0.7400, 0.7700, standard error 0.0150")
    logreg = Row("logreg C=0.1", "peer", 0.71, 0.5, 0.8, 1.0, "s")
    assert peer_quality.summary([logreg, *means], runs) == (
        "best zoo minus best peer: +0.0000, lr minus logreg: +0.0000, "
        "zoo minus one process: dcn_v2 +0.0000"
    )
    assert peer_quality.targets([logreg, *means], runs) == [
        "target lr >= logreg -0.003: +0.0000 met",
        "target best zoo >= best peer -0.002: dcn_v2 (zoo) (mean of 2 seeds) 0.7550 vs "
        "logreg C=0.1 0.7100: +0.0450 met",
        "target dcn_v2 >= one process -0.002: +0.0000 (standard error 0.0100) met",
    ]
    short = [
        dataclasses.replace(r, auc=r.auc - 0.01) if r.method.startswith("lr") else r
        for r in [logreg, *means]
    ]
    assert peer_quality.targets(short, runs)[0] == "target lr >= logreg -0.003: -0.0100 NOT met"
    table = peer_quality.paired_table(runs, [0, 1])
    assert "| dcn_v2: zoo minus one process | -0.0100 | +0.0100 | +0.0000 | 0.0100 |" in table
    assert "| dcn_v2 one process | 0.7500 | 0.7600 | 0.7550 | |" in table


def test_synthetic_defaults_validate_on_day_6_with_early_stopping(tmp_path, capsys, monkeypatch):
    checked = []
    validate = peer_quality.validate_inputs

    def recording(config_path, overrides):
        checked.append(validate(config_path, overrides))
        return checked[-1]

    monkeypatch.setattr(peer_quality, "validate_inputs", recording)
    code = peer_quality.main(["--check", "--rows-per-day", "300", "--work-dir", str(tmp_path)])
    assert code == 0
    assert (
        "2026-01-01..2026-01-05 (1,500 rows) for training, 2026-01-07 (300 rows) held "
        "out, 2026-01-06 for validation"
    ) in capsys.readouterr().out
    train = checked[0].config.train  # what every method is given
    assert (train.epochs, train.early_stopping.patience) == (10, 1)
    # a window of one's own: no validation day, the config's own training settings
    code = peer_quality.main(
        [
            "--check",
            "--rows-per-day",
            "300",
            "--work-dir",
            str(tmp_path / "own"),
            "--train",
            "2026-01-01..2026-01-06",
        ]
    )
    assert code == 0
    # (no pass count chosen: the window's last day is carved off to choose it on)
    data = checked[1].config.data
    assert (data.train.dates, data.validation.dates) == ("2026-01-01..2026-01-05", "2026-01-06")
    assert data.validation_carved
    assert (checked[1].config.train.epochs, checked[1].config.train.early_stopping.patience) == (
        30,
        2,
    )
