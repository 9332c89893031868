"""The models of user behaviour, ``din``, ``bst`` and ``dien``, end to end with real
servers.

Four days of ``recsys-dist data synth --dataset behaviour`` (6,000 rows a day), whose
click depends on how the candidate's category matches the history's, and
features/behaviour_synth.yaml (dynamic ``item`` and ``user`` tables, a hashed ``cate``
table, ``hist_cate_id`` side_of ``hist_item_id``, histories of up to 80 items cut to 50).
The claims:

- ``din`` trains on 2 workers + 2 parameter servers, one process each, checkpoints, and
  scores the held-out day well above chance (below the oracle); ``recsys-dist evaluate``
  of its checkpoint gives the same figures; the dynamic item table holds a row for every
  item of the candidates and of the 50 newest positions of the histories, and nothing else;
- its export, served by a process that imports only TensorFlow, takes each history as a
  padded ``[N, L]`` input plus ``<column>_lengths`` and gives ``evaluate``'s predictions,
  null, empty and over-long histories included, whatever the padding; without the
  histories the predictions change;
- ``recsys-dist retrain`` of the next day, with the run published as the day before,
  warm-starts from its checkpoint (the step goes on, every item not read that day keeps
  its vector, the table keeps the old ids and admits the new), gates, exports, publishes;
- ``dien`` trains on the same servers and tables, and its export serves ``evaluate``'s
  predictions whatever the padding;
- ``bst`` (the model switched with ``--set``) trains and scores above chance under
  ``mirrored`` and ``multi_worker_mirrored`` on hashed tables, which those strategies need
  (the dynamic config is refused, naming the table), and both synchronous strategies end
  at the same weights.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support import command_forks
from tests.support.configs import changed, write_yaml
from tests.support.paths import CLI, REPO
from tests.support.refusals import refused_here
from tests.support.retrain import publish
from tests.support.run_configs import COLLECTIVE
from tests.support.serving import ONLY_TENSORFLOW, serving_env
from tests.support.state import assert_same_state
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster

FEATURES = REPO / "features" / "behaviour_synth.yaml"
ROWS_PER_DAY = 6_000
MAX_LENGTH = 50  # hist_item_id's max_length in FEATURES
#: The first run, published by hand as this day's model; retraining runs the day after.
FIRST_DAY, NEXT_DAY = "2026-01-02", "2026-01-03"
LIST_COLUMNS = ("hist_item_id", "hist_cate_id")
INPUTS = {
    "user_id": "int64",
    "item_id": "int64",
    "cate_id": "int64",
    "hist_item_id": "list<int64>",
    "hist_cate_id": "list<int64>",
}
# One epoch on 12,000 rows: small batches and brisk learning rates (Adagrad's accumulator
# starting low, as in configs/amazon_din.yaml) give din a held-out AUC of about 0.60
# against the oracle's 0.82, and bst about the same.
MIN_AUC = 0.56
BST = (
    "--set",
    "model.name=bst",
    "--set",
    "model.params.hidden_units=[16]",
    "--set",
    "model.params.ffn_units=16",
    "--set",
    "model.params.attention_dropout=0.0",
)
DIEN = (
    "--set",
    "model.name=dien",
    "--set",
    "model.params.hidden_units=[16]",
    "--set",
    "model.params.attention_units=[8]",
    "--set",
    "model.params.auxiliary_units=[8]",
    "--set",
    "model.params.auxiliary_loss_weight=1.0",
)
MIRRORED = (
    "--set",
    "cluster.strategy=mirrored",
    "--set",
    "cluster.mode=in_process",
    "--set",
    "cluster.workers=2",
)


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    result = command_forks.run([CLI, *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def write_config(directory: pathlib.Path, data: pathlib.Path, features: str) -> str:
    """din on the first two days, held out on the third, 2 workers + 2 parameter servers
    in processes of their own; a mid-run checkpoint."""
    return write_yaml(
        directory / "din.yaml",
        {
            "features": features,
            "data": {
                "path": str(data),
                "train": {"dates": "2026-01-01..2026-01-02"},
                "eval": {"dates": "2026-01-03"},
            },
            "input": {"batch_size": 64},
            "model": {
                "name": "din",
                "labels": ["click"],
                "params": {"hidden_units": [16], "attention_units": [8]},
            },
            "train": {
                "embedding_optimizer": {
                    "name": "adagrad",
                    "learning_rate": 0.05,
                    "initial_accumulator_value": 0.0001,
                },
                "dense_optimizer": {"name": "adam", "learning_rate": 0.01},
                "steps_per_call": 10,
                "epochs": 1,
                "checkpoint_every_steps": 100,
                "log_every_seconds": 1000,
            },
            "cluster": {"mode": "local", "workers": 2, "ps": 2, "strategy": "parameter_server"},
        },
    )


def items_read(data: pathlib.Path, *dates: str) -> set[int]:
    """The item ids training reads on ``dates``: the candidates and the MAX_LENGTH newest
    items of every history (stored newest last)."""
    table = pq.read_table(
        [str(p) for d in dates for p in sorted((data / f"dt={d}").glob("*.parquet"))],
        columns=["item_id", "hist_item_id"],
    )
    items = set(table["item_id"].to_pylist())
    for history in table["hist_item_id"].to_pylist():
        items.update((history or [])[-MAX_LENGTH:])
    return items


def item_keys(ids) -> list[int]:
    """The dynamic table's keys of item ids, hashed as the history feature hashes them."""
    import tensorflow as tf

    from recsys_dist.features.config import load_feature_config

    features = load_feature_config(str(FEATURES))
    feature = features.features["hist_item_id"]
    keys, _ = feature.hash_ids(tf.constant(sorted(ids), tf.int64), features.rows_of(feature))
    return keys.numpy().tolist()


def item_vectors(model_dir: pathlib.Path) -> dict[int, np.ndarray]:
    """Key -> vector of the item table in the newest complete checkpoint, every shard."""
    import tensorflow as tf

    newest = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
    reader = tf.train.load_checkpoint(str(newest / "variables"))
    suffix = "/index/.ATTRIBUTES/table-keys"
    bases = sorted(
        k[: -len(suffix)]
        for k in reader.get_variable_to_shape_map()
        if re.search(r"/_dynamic_tables/item/shards/\d+" + re.escape(suffix) + "$", k)
    )
    assert len(bases) == 2, bases  # a shard per parameter server
    vectors = {}
    for base in bases:
        keys = reader.get_tensor(base + suffix)
        rows = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
        emb = reader.get_tensor(f"{base}/emb/.ATTRIBUTES/VARIABLE_VALUE")
        assert sorted(rows.tolist()) == list(range(len(emb)))  # a row each, none wasted
        vectors.update(zip(keys.tolist(), emb[rows]))
    return vectors


def newest_checkpoint(model_dir: pathlib.Path) -> tuple[pathlib.Path, int]:
    newest = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
    return newest, int(json.loads((newest / "state.json").read_text())["step"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(tmp, data, config, output): din trained by ``recsys-dist train`` into
    ``tmp/root/runs/FIRST_DAY`` (a retraining root's layout), evaluated on day 3."""
    from recsys_dist.cli import main

    tmp = tmp_path_factory.mktemp("sequence_models")
    data = tmp / "data"
    assert (
        main(
            [
                "data",
                "synth",
                "--dataset",
                "behaviour",
                "--out",
                str(data),
                "--days",
                "4",
                "--rows-per-day",
                str(ROWS_PER_DAY),
                "--rows-per-file",
                "3000",
                "--users",
                "3000",
                "--seed",
                "11",
                "--quiet",
            ]
        )
        == 0
    )
    config = write_config(tmp, data, str(FEATURES))
    run = TrainRun(config, tmp / "root" / "runs" / FIRST_DAY)
    # one process per server while it trains (the first checkpoint is mid-run)
    run.wait_for(r"^checkpoint step [\d,]+:")
    servers = (run.servers("worker"), run.servers("ps"))
    assert run.finish() == 0, run.output[-3000:]
    assert [len(pids) for pids in servers] == [2, 2], servers
    return tmp, data, config, run.output


@pytest.fixture(scope="module")
def evaluated(setup):
    """``recsys-dist evaluate`` of the din run on day 3 (the run's own config)."""
    tmp = setup[0]
    out = tmp / "evaluate"
    cli(
        "evaluate",
        "--model-dir",
        str(tmp / "root" / "runs" / FIRST_DAY),
        "--out",
        str(out),
        "--quiet",
    )
    return out


def test_din_on_parameter_servers_trains_checkpoints_evaluates_and_gives_history_items_rows(
    setup, evaluated
):
    tmp, data, _, output = setup
    model_dir = tmp / "root" / "runs" / FIRST_DAY
    assert "cluster  2 workers + 2 ps (local" in output, output[-3000:]
    assert sorted(p.name for p in (model_dir / "logs").iterdir()) == [
        "ps-0.log",
        "ps-1.log",
        "worker-0.log",
        "worker-1.log",
    ]
    steps = [
        int(s.replace(",", "")) for s in re.findall(r"^checkpoint step ([\d,]+):", output, re.M)
    ]
    result = json.loads((model_dir / "train_result.json").read_text())
    assert 100 <= steps[0] < steps[-1] == result["steps"] == newest_checkpoint(model_dir)[1]
    assert result["examples"] == 2 * ROWS_PER_DAY
    # held out: well above chance, below the oracle (the label's true logit)
    click = result["eval"]["labels"]["click"]
    print(
        f"din on parameter servers: held-out AUC {click['auc']:.4f}, "
        f"oracle {click['oracle']['auc']:.4f}"
    )
    assert result["eval"]["rows"] == ROWS_PER_DAY
    assert MIN_AUC < click["auc"] < click["oracle"]["auc"], click
    assert re.search(r"^eval +click: AUC 0\.\d+, logloss .* \| oracle AUC", output, re.M)
    # evaluate restores the last checkpoint and scores the same rows the same way
    metrics = json.loads((evaluated / "metrics.json").read_text())
    assert metrics["step"] == result["steps"] and metrics["rows"] == ROWS_PER_DAY
    again = metrics["labels"]["click"]
    assert abs(again["auc"] - click["auc"]) < 1e-6, (again["auc"], click["auc"])
    assert abs(again["logloss"] - click["logloss"]) < 1e-6
    # the dynamic tables: a row for every user, and for every item read as a candidate or
    # among the 50 newest of a history; most items are in histories only
    tables = result["dynamic_tables"]
    users = set(
        pq.read_table(
            [
                str(p)
                for d in ("2026-01-01", "2026-01-02")
                for p in sorted((data / f"dt={d}").glob("*.parquet"))
            ],
            columns=["user_id"],
        )["user_id"].to_pylist()
    )
    assert tables["embeddings_user"]["live_ids"] == len(users)
    items = items_read(data, "2026-01-01", "2026-01-02")
    candidates = set(
        pq.read_table(data / "dt=2026-01-01")["item_id"].to_pylist()
        + pq.read_table(data / "dt=2026-01-02")["item_id"].to_pylist()
    )
    assert len(items - candidates) > len(candidates)
    stats = tables["embeddings_item"]
    assert stats["live_ids"] == stats["admitted_this_run"] == len(items), (stats, len(items))
    assert stats["lookups_without_row"] == 0 and stats["shards"] == 2
    # ... by key, in the checkpoint: exactly those items
    assert set(item_vectors(model_dir)) == set(item_keys(items))


SERVE_SCRIPT = (
    ONLY_TENSORFLOW
    + r"""
import json

import numpy as np
import tensorflow as tf

export, requests, out_file = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
serve = tf.saved_model.load(export).signatures["serving_default"]
result = {"signature": {name: [spec.dtype.name, spec.shape.as_list()]
                        for name, spec in serve.structured_input_signature[1].items()},
          "outputs": sorted(serve.structured_outputs)}
for name in requests:
    request = dict(np.load(name + ".npz"))
    result[name] = serve(**{c: tf.constant(v) for c, v in request.items()})["click"] \
        .numpy().tolist()
result["recsys_dist_imported"] = "recsys_dist" in sys.modules
with open(out_file, "w") as handle:
    json.dump(result, handle)
"""
)


def request(
    table, pad: int = 0, extra_width: int = 0, histories: bool = True
) -> dict[str, np.ndarray]:
    """The serving request for ``table``'s rows: each list column padded with ``pad`` to
    ``[N, L + extra_width]`` plus ``<column>_lengths`` (a null list has length 0); without
    ``histories``, every history empty."""
    out = {
        c: table[c].to_numpy().astype(np.int64)
        for c, d in INPUTS.items()
        if not d.startswith("list<")
    }
    for column in LIST_COLUMNS:
        lists = (
            [v or [] for v in table[column].to_pylist()]
            if histories
            else [[] for _ in range(table.num_rows)]
        )
        width = max(1, max(len(v) for v in lists)) + extra_width
        out[column] = np.array([v + [pad] * (width - len(v)) for v in lists], np.int64)
        out[column + "_lengths"] = np.array([len(v) for v in lists], np.int64)
    return out


def serve_held_out_rows(data: pathlib.Path, model_dir: pathlib.Path, evaluated, work, model):
    """Exports ``model_dir`` into ``work/export`` and serves rows of the held-out day in a
    process with only TensorFlow: the first 200 of its first file and every null or empty
    history, zero-padded, padded otherwise, and with every history empty. Checks the
    export's signature and that the zero-padded predictions are ``evaluate``'s; returns
    ``(served, lengths)``: the predictions of each request, the rows' history lengths."""
    export = work / "export"
    cli("export", "--model-dir", str(model_dir), "--out", str(export))
    info = json.loads((export / "assets.extra" / "export.json").read_text())
    assert info["model"] == model and info["inputs"] == INPUTS

    path = sorted((data / "dt=2026-01-03").glob("*.parquet"))[0]
    table = pq.read_table(path)
    lengths = np.array([len(v or []) for v in table["hist_item_id"].to_pylist()])
    null = ~table["hist_item_id"].is_valid().to_numpy(zero_copy_only=False)
    empty = (lengths == 0) & ~null
    picked = np.union1d(np.arange(200), np.flatnonzero(lengths == 0))
    assert null[picked].sum() >= 1 and empty[picked].sum() >= 1
    assert (lengths[picked] > MAX_LENGTH).sum() >= 10  # cut to the 50 newest
    rows = table.take(picked)

    # what evaluate predicted for those rows (row_id: file index << 32 | row in file)
    metrics = json.loads((evaluated / "metrics.json").read_text())
    files = [str(pathlib.Path(f).resolve()) for f in metrics["data"]]
    file_index = files.index(str(path.resolve()))
    predictions = pq.read_table(evaluated / "predictions.parquet").to_pydict()
    by_row = {
        r: (label, logit)
        for r, label, logit in zip(
            predictions["row_id"], predictions["label_click"], predictions["logit_click"]
        )
    }
    expected = [by_row[(file_index << 32) | int(i)] for i in picked]
    assert [label for label, _ in expected] == rows["click"].to_pylist()  # the same rows
    expected = 1 / (1 + np.exp(-np.array([logit for _, logit in expected], np.float64)))

    requests = {
        "zero_padded": request(rows),
        "other_padding": request(rows, pad=987_654_321, extra_width=7),
        "without_histories": request(rows, histories=False),
    }
    for name, arrays in requests.items():
        np.savez(work / f"{name}.npz", **arrays)
    (work / "serve.py").write_text(SERVE_SCRIPT)
    done = subprocess.run(
        [sys.executable, "serve.py", str(export), json.dumps(list(requests)), "result.json"],
        cwd=work,
        env=serving_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    served = json.loads((work / "result.json").read_text())
    assert served["recsys_dist_imported"] is False and served["outputs"] == ["click"]
    signature = {
        "user_id": ["int64", [None]],
        "item_id": ["int64", [None]],
        "cate_id": ["int64", [None]],
    }
    for column in LIST_COLUMNS:
        signature.update({column: ["int64", [None, None]], column + "_lengths": ["int64", [None]]})
    assert served["signature"] == signature
    got = np.asarray(served["zero_padded"])
    # probabilities from another process and other batches: float32 rounding of the logits
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert expected.std() > 1e-3
    return {name: np.asarray(served[name]) for name in requests}, lengths[picked]


def test_export_serves_padded_histories_as_evaluate_scores_them(setup, evaluated):
    tmp, data, _, _ = setup
    work = tmp / "serve"
    work.mkdir()
    served, lengths = serve_held_out_rows(
        data, tmp / "root" / "runs" / FIRST_DAY, evaluated, work, "din"
    )
    got = served["zero_padded"]
    # 7 more positions change the shapes: the sums over up to 50 real positions (and the
    # element-wise exps, vectorised or not) may round differently, up to 50 u of their
    # absolute sums before the tower; a probability moves by at most a quarter of its
    # logit's change. The same 1e-5 as against evaluate's predictions.
    np.testing.assert_allclose(served["other_padding"], got, atol=1e-5)
    # the histories count: without them the predictions change, except where there were none
    # (their attention outputs are exact zeros either way, and the towers see the same rows)
    without = served["without_histories"]
    had = lengths > 0
    np.testing.assert_allclose(without[~had], got[~had], atol=1e-6)
    changed_rows = np.abs(without[had] - got[had]) > 1e-6
    print(
        f"served {len(got)} rows; without their histories {changed_rows.sum()} of "
        f"{had.sum()} change"
    )
    assert changed_rows.mean() > 0.95, changed_rows.mean()


def test_dien_trains_on_parameter_servers_with_dynamic_tables_and_serves_as_it_scores(setup):
    """``dien`` (the model switched with ``--set``) on the same 2 workers + 2 parameter
    servers and dynamic tables: it trains with its auxiliary loss, scores the held-out
    day above chance, and its export serves ``evaluate``'s predictions, whatever the
    padding (its GRUs leave their state at padding steps)."""
    tmp, data, config, _ = setup
    model_dir = tmp / "dien"
    run = TrainRun(config, model_dir, *DIEN)
    assert run.finish() == 0, run.output[-3000:]
    assert "model    dien" in run.output, run.output[-3000:]
    result = json.loads((model_dir / "train_result.json").read_text())
    click = result["eval"]["labels"]["click"]
    print(f"dien on parameter servers: held-out AUC {click['auc']:.4f}")
    assert MIN_AUC < click["auc"] < click["oracle"]["auc"], click
    assert result["dynamic_tables"]["embeddings_item"]["shards"] == 2
    evaluated = tmp / "dien_evaluate"
    cli("evaluate", "--model-dir", str(model_dir), "--out", str(evaluated), "--quiet")
    work = tmp / "dien_serve"
    work.mkdir()
    served, lengths = serve_held_out_rows(data, model_dir, evaluated, work, "dien")
    # the GRUs run as many steps as the batch's longest history whatever the padding; the
    # attention unit's sums may round differently as for din: the same 1e-5
    np.testing.assert_allclose(served["other_padding"], served["zero_padded"], atol=1e-5)
    had = lengths > 0
    assert (np.abs(served["without_histories"] - served["zero_padded"])[had] > 1e-6).mean() > 0.95


def test_daily_retraining_warm_starts_din_from_the_published_run(setup):
    """The din run published by hand as FIRST_DAY's model (as test_offline_eval.py does);
    ``recsys-dist retrain --date NEXT_DAY`` trains NEXT_DAY from it and scores both models
    on the day after. Its servers run inside the command's process: the first run put din
    on server processes already, and each server process costs seconds of start-up."""
    tmp, data, config, _ = setup
    root = tmp / "root"
    first = root / "runs" / FIRST_DAY
    checkpoint, step = newest_checkpoint(first)
    publish(
        root,
        FIRST_DAY,
        {
            "date": FIRST_DAY,
            "model": "din",
            "labels": ["click"],
            "train_dates": "2026-01-01..2026-01-02",
            "eval_dates": "2026-01-03",
            "checkpoint": str(checkpoint),
            "step": step,
            "parent": None,
        },
        first,
    )
    (root / "CURRENT").write_text(FIRST_DAY + "\n")
    before = item_vectors(first)

    done = cli(
        "retrain",
        "--config",
        config,
        "--date",
        NEXT_DAY,
        "--set",
        f"retrain.root={root}",
        "--set",
        "retrain.gate.max_drop=1.0",
        "--set",
        "cluster.mode=in_process",
    )
    warm = re.search(r"^warm +start from (\S+): step ([\d,]+)", done.stdout, re.M)
    assert warm and warm.group(1) == str(checkpoint), done.stdout[-3000:]
    assert int(warm.group(2).replace(",", "")) == step
    manifest = json.loads((root / "published" / NEXT_DAY / "manifest.json").read_text())
    assert manifest["parent"] == FIRST_DAY and manifest["warm_started_from"] == str(checkpoint)
    assert (manifest["train_dates"], manifest["eval_dates"]) == (NEXT_DAY, "2026-01-04")
    run = root / "runs" / NEXT_DAY
    result = json.loads((run / "train_result.json").read_text())
    # the step counter went on from the first run's: one day's rows more
    assert manifest["step"] == newest_checkpoint(run)[1] > step
    assert result["examples"] == ROWS_PER_DAY
    assert (root / "published" / NEXT_DAY / "export" / "saved_model.pb").is_file()
    assert (root / "CURRENT").read_text().strip() == NEXT_DAY
    new_auc = manifest["metrics"]["click"]["auc"]
    old_auc = json.loads((run / "eval_previous" / "metrics.json").read_text())["labels"]["click"][
        "auc"
    ]
    print(
        f"din retrained on {NEXT_DAY}: AUC on 2026-01-04 {new_auc:.4f} "
        f"(the published run: {old_auc:.4f})"
    )
    assert new_auc > MIN_AUC and old_auc > MIN_AUC

    # the item table: the first run's items kept, the day's new ones admitted; every item
    # the day never read kept its vector exactly, and training moved those it read
    after = item_vectors(run)
    old_items = items_read(data, "2026-01-01", "2026-01-02")
    day_items = items_read(data, NEXT_DAY)
    stats = result["dynamic_tables"]["embeddings_item"]
    assert stats["live_ids"] == len(old_items | day_items) == len(after)
    assert stats["admitted_this_run"] == len(day_items - old_items)
    unread = item_keys(old_items - day_items)
    assert set(before) == set(item_keys(old_items)) and len(unread) > 1000
    for key in unread:
        np.testing.assert_array_equal(after[key], before[key])
    reread = item_keys(old_items & day_items)
    moved = sum(not np.array_equal(after[key], before[key]) for key in reread)
    print(
        f"retrain: {len(unread)} items unread on {NEXT_DAY} kept their vectors; "
        f"{moved} of {len(reread)} read again moved"
    )
    assert moved > 0.9 * len(reread), (moved, len(reread))


def test_bst_trains_under_mirrored_and_multi_worker_mirrored_on_hashed_tables(setup, capsys):
    tmp, data, config, _ = setup
    work = tmp / "bst"
    # those strategies copy every table to each replica: a dynamic table is refused
    refused = refused_here(
        capsys, "train", "--config", config, "--model-dir", str(work / "refused"), *BST, *MIRRORED
    )
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "mirrored needs hashed tables, but table 'item' of" in refused.stderr, refused.stderr
    assert "is kind: dynamic" in refused.stderr
    # the same features with hashed item and user tables
    features = changed(
        yaml.safe_load(FEATURES.read_text()),
        {"tables.item": {"rows": 40_000, "dim": 16}, "tables.user": {"rows": 4_000, "dim": 16}},
    )
    hashed = write_config(work, data, write_yaml(work / "features.yaml", features))
    # the same global batches in the same order on both: a step is one batch of each
    same_batches = (
        "--set",
        "input.shuffle=false",
        "--set",
        "train.steps_per_call=1",
        "--set",
        "train.checkpoint_every_steps=1000",
    )
    aucs = {}
    for name, strategy, line in (
        ("mirrored", MIRRORED, "2 replicas in this process (mirrored, synchronous: CPU:0, CPU:1)"),
        (
            "multi_worker_mirrored",
            COLLECTIVE,
            "cluster  worker 0 of 2 (multi_worker_mirrored, synchronous",
        ),
    ):
        run = TrainRun(hashed, work / name, *BST, *strategy, *same_batches)
        assert run.finish() == 0, run.output[-3000:]
        assert line in run.output and "model bst" in run.output, run.output[-3000:]
        result = json.loads((work / name / "train_result.json").read_text())
        click = result["eval"]["labels"]["click"]
        aucs[name] = click["auc"]
        assert result["examples"] == 2 * ROWS_PER_DAY
        assert MIN_AUC < click["auc"] < click["oracle"]["auc"], (name, click)
    print("bst held-out AUC: " + ", ".join(f"{k} {v:.4f}" for k, v in aucs.items()))
    assert abs(aucs["mirrored"] - aucs["multi_worker_mirrored"]) < 1e-3
    # the key projection's bias adds the same q . b to every score of a row, which the
    # softmax ignores: its gradient is 0 in exact arithmetic, rounding noise in practice
    assert_same_state(
        work / "mirrored", work / "multi_worker_mirrored", noise_only=("key_dense/bias",)
    )
