"""Dynamic tables on 2 workers and 2 parameter servers (real processes): training reads
the checkpoint back (no id has two rows, no row two ids, every row below its shard's
counter, every id on its shard), then evaluates, exports and serves in a fresh process."""

from __future__ import annotations

import collections
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from recsys_dist.features.config import TableSpec
from tests.support import command_forks
from tests.support.paths import CLI

pytestmark = pytest.mark.cluster


def test_two_workers_never_give_an_id_two_rows(tmp_path):
    """Real servers: 2 workers admit the same new users concurrently, 2 shards. The
    servers run inside the command's process (``in_process``): the workers' closures
    still run at once, each on its own worker server, against the same table shards."""
    import pyarrow.parquet as pq

    from recsys_dist.data.synth_files import synthesize
    from recsys_dist.models.dynamic_table import DynamicTable

    data = tmp_path / "data"
    synthesize(data, days=2, rows_per_day=20_000, seed=5, rows_per_file=5_000)
    features = {
        "tables": {
            "user": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 20_000},
            "c2": {"rows": 1200, "dim": 8},
        },
        "features": {
            "user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
            "C2": {"kind": "categorical", "dtype": "int64", "table": "c2"},
            "I1": {"kind": "numeric", "transform": "log1p", "nan_means_missing": True},
        },
        "labels": {"click": {}},
    }
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(features))
    config = {
        "features": "features.yaml",
        "data": {
            "path": str(data),
            "train": {"dates": "2026-01-01"},
            "eval": {"dates": "2026-01-02"},
        },
        "input": {"batch_size": 256},
        "model": {"name": "deepfm", "labels": ["click"], "params": {"hidden_units": [16]}},
        "train": {
            "embedding_optimizer": {"name": "adagrad", "learning_rate": 0.1},
            "dense_optimizer": {"name": "adam", "learning_rate": 0.003},
            "steps_per_call": 5,
            "log_every_seconds": 0,
        },
        "cluster": {"mode": "in_process", "workers": 2, "ps": 2},
    }
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    trained = command_forks.run(
        [CLI, "train", "--config", str(config_file), "--model-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "table    embeddings_user:" in trained.stdout
    users = set(
        pq.read_table(data / "dt=2026-01-01", columns=["user_id"]).column("user_id").to_pylist()
    )
    result = json.loads((run / "train_result.json").read_text())
    # deepfm reads the table twice: its embeddings and its linear part
    for layer in ("embeddings_user", "linear_embeddings_user"):
        assert result["dynamic_tables"][layer]["live_ids"] == len(users), layer
    checkpoint = sorted((run / "checkpoints").glob("ckpt-*"))[-1] / "variables"
    reader = tf.train.load_checkpoint(str(checkpoint))
    routing = DynamicTable(TableSpec("user", 8, "dynamic", capacity_per_shard=1), 8, shards=2)
    saved = reader.get_variable_to_shape_map()
    used_rows = []
    for shard in range(2):
        # the two layers share the table's id index: the checkpoint holds it once
        found = [
            k
            for k in saved
            if k.endswith(f"_dynamic_tables/user/shards/{shard}/index/.ATTRIBUTES/table-keys")
        ]
        assert len(found) == 1, found
        for layer in ("embeddings", "linear/embeddings"):
            assert (
                f"model/{layer}/_dynamic_tables/user/shards/{shard}/emb/.ATTRIBUTES/"
                "VARIABLE_VALUE" in saved
            )
        base = found[0].rsplit("/index/", 1)[0]
        stored = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
        rows = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
        used = int(reader.get_tensor(f"{base}/next_row/.ATTRIBUTES/VARIABLE_VALUE"))
        used_rows.append(used)
        assert len(set(stored.tolist())) == len(stored)  # no id twice
        assert len(set(rows.tolist())) == len(rows) == used  # no row twice, none wasted
        assert rows.min() >= 0 and rows.max() < used
        assert np.all(routing.shard_of(tf.constant(stored)).numpy() == shard)
        # rows, their optimizer slots and days are saved up to the rows in use only
        for layer, dim in (("embeddings", 8), ("linear/embeddings", 1)):
            emb = f"model/{layer}/_dynamic_tables/user/shards/{shard}/emb/."
            assert saved[emb + "ATTRIBUTES/VARIABLE_VALUE"] == [used, dim], layer
            slots = [k for k in saved if k.startswith(emb + "OPTIMIZER_SLOT/")]
            assert slots and all(saved[k] == [used, dim] for k in slots), slots
        assert saved[f"{base}/last_seen/.ATTRIBUTES/VARIABLE_VALUE"] == [used]
    # evaluated on 3 and 1 parameter servers: the checkpoint's 2 shards are placed
    # round-robin on the servers there are, and score as the training cluster (2 servers)
    # scored the same weights at the end of training
    trained_on_2 = result["eval"]["labels"]["click"]
    for ps in (3, 1):
        evaluated = command_forks.run(
            [
                CLI,
                "evaluate",
                "--model-dir",
                str(run),
                "--out",
                str(tmp_path / f"eval{ps}"),
                "--quiet",
                "--set",
                f"cluster.ps={ps}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert evaluated.returncode == 0, evaluated.stderr
        click = json.loads((tmp_path / f"eval{ps}" / "metrics.json").read_text())["labels"]["click"]
        # Other processes, whose op threads (the machine's cores split over 3, 4 or 5
        # tasks) may round the logits differently by an ulp or so: that reorders only the
        # pairs scored within rounding of each other, on 20,000 rows a change of ~1e-7
        # (one pair flipped is 1 / (positives x negatives) ~ 1e-8). A shard placed wrong
        # gives rows other vectors, far more.
        assert click["auc"] == pytest.approx(trained_on_2["auc"], abs=1e-6), ps
        assert click["logloss"] == pytest.approx(trained_on_2["logloss"], abs=1e-6), ps
    exported = command_forks.run(
        [
            CLI,
            "export",
            "--model-dir",
            str(run),
            "--out",
            str(tmp_path / "export"),
            "--set",
            "cluster.ps=3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert exported.returncode == 0, exported.stderr
    served_shapes = tf.train.load_checkpoint(
        str(tmp_path / "export" / "variables" / "variables")
    ).get_variable_to_shape_map()
    # the export holds the live ids' rows (two layers, two shards), not the capacity
    exported_rows = collections.Counter(tuple(s) for s in served_shapes.values())
    for used in used_rows:
        assert exported_rows[(used, 8)] and exported_rows[(used, 1)], (used, served_shapes)
    assert not [s for s in served_shapes.values() if s and s[0] >= 20_000]
    serve = (
        "import numpy as np, tensorflow as tf\n"
        f"m = tf.saved_model.load({str(tmp_path / 'export')!r})\n"
        "f = m.signatures['serving_default']\n"
        "ids = tf.constant([%d, -12345], tf.int64)\n"
        "out = f(user_id=ids, C2=tf.constant([1, 1], tf.int64),\n"
        "        I1=tf.constant([1.0, 1.0]))['click'].numpy()\n"
        "print(out[0], out[1])\n" % next(iter(users))
    )
    served = subprocess.run(
        [sys.executable, "-c", serve], capture_output=True, text=True, timeout=300
    )
    assert served.returncode == 0, served.stderr[-2000:]
    known, unknown = map(float, served.stdout.split())
    assert 0 < known < 1 and 0 < unknown < 1 and known != unknown

    # a second pass resumed on 3 parameter servers, the capacity raised: the model dir
    # keeps its 2 shards (one server holds none of them) and every id stays on its shard,
    # in a row of its own
    features["tables"]["user"]["capacity_per_shard"] = 30_000
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(features))
    resumed = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            str(config_file),
            "--model-dir",
            str(run),
            "--set",
            "train.epochs=2",
            "--set",
            "cluster.ps=3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "2 workers + 3 ps" in resumed.stdout and "resume   from" in resumed.stdout
    assert "table    embeddings_user: " in resumed.stdout
    assert (
        json.loads((run / "train_result.json").read_text())["dynamic_tables"]["embeddings_user"][
            "capacity"
        ]
        == 60_000
    )
    newest = sorted((run / "checkpoints").glob("ckpt-*"))[-1]
    assert json.loads((newest / "state.json").read_text())["signature"]["dynamic_shards"] == 2
    reader = tf.train.load_checkpoint(str(newest / "variables"))
    for shard in range(2):
        base = f"model/embeddings/_dynamic_tables/user/shards/{shard}"
        stored = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
        rows = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
        assert len(set(stored.tolist())) == len(stored) == used_rows[shard]
        assert sorted(rows.tolist()) == list(range(used_rows[shard]))
        assert np.all(routing.shard_of(tf.constant(stored)).numpy() == shard)


def write_user_run(
    tmp_path: pathlib.Path, data_root: pathlib.Path, user_table: dict, **config: dict
) -> pathlib.Path:
    """Writes a small DCN-v2 run over the synthetic ``user_id`` (dynamic table ``user``, dim
    8, plus ``user_table``'s keys) and ``C2``: 1 worker and 2 parameter servers inside the
    command's process (real servers; no fault is tested with it). ``config`` adds or
    replaces top-level sections. Returns the config file."""
    features = {
        "tables": {
            "user": {"kind": "dynamic", "dim": 8, **user_table},
            "c2": {"rows": 1200, "dim": 8},
        },
        "features": {
            "user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
            "C2": {"kind": "categorical", "dtype": "int64", "table": "c2"},
        },
        "labels": {"click": {}},
    }
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(features))
    run_config = {
        "features": "features.yaml",
        "data": {"path": str(data_root)},
        "input": {"batch_size": 256},
        "model": {
            "name": "dcn_v2",
            "labels": ["click"],
            "params": {"cross_layers": 1, "low_rank": 4, "hidden_units": [16]},
        },
        "train": {"steps_per_call": 5, "log_every_seconds": 1000},
        "cluster": {"mode": "in_process", "workers": 1, "ps": 2},
    } | config
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(run_config))
    return config_file


def test_daily_retraining_evicts_the_ids_not_seen_within_evict_after_days(tmp_path):
    """Three days of ``recsys-dist retrain`` on 1 worker and 2 parameter servers with
    ``evict_after_days: 1``: day 3, on 3 parameter servers, warm-starts from day 2
    (re-sharding its ids), drops exactly the users last seen on day 1, keeps those of
    day 2, and then admits day 3's; every id sits on its shard in a row of its own."""
    import pyarrow.parquet as pq

    from recsys_dist.data.synth_files import synthesize
    from recsys_dist.models.dynamic_table import DynamicTable

    data = tmp_path / "data"
    synthesize(data, days=4, rows_per_day=4_000, seed=6, rows_per_file=2_000, users=3_000)
    users = [
        set(
            pq.read_table(data / f"dt=2026-01-0{day}", columns=["user_id"])
            .column("user_id")
            .to_pylist()
        )
        for day in (1, 2, 3)
    ]
    # publish every day, so each day warm-starts from the one before
    config_file = write_user_run(
        tmp_path,
        data,
        {"capacity_per_shard": 5_000, "evict_after_days": 1},
        retrain={"root": str(tmp_path / "root"), "gate": {"max_drop": 1.0}},
    )
    outputs = []
    for day in (1, 2, 3):
        done = command_forks.run(
            [
                CLI,
                "retrain",
                "--config",
                str(config_file),
                "--date",
                f"2026-01-0{day}",
                *(["--set", "cluster.ps=3"] if day == 3 else []),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs.append(done.stdout)
    assert "evict    table embeddings_user: 0 ids last seen before 2026-01-01" in outputs[1]
    dropped, kept = len(users[0] - users[1]), len(users[1])
    assert dropped > 0
    assert (
        f"evict    table embeddings_user: {dropped:,} ids last seen before 2026-01-02 "
        f"dropped, {kept:,} kept"
    ) in outputs[2], outputs[2][-3000:]
    result = json.loads(
        (tmp_path / "root" / "runs" / "2026-01-03" / "train_result.json").read_text()
    )
    stats = result["dynamic_tables"]["embeddings_user"]
    assert stats["evicted_at_start"] == dropped
    assert stats["live_ids"] == len(users[1] | users[2]) and stats["shards"] == 3
    assert stats["admitted_this_run"] == len(users[2] - users[1])  # after the eviction
    run = tmp_path / "root" / "runs" / "2026-01-03"
    reader = tf.train.load_checkpoint(str(sorted(run.glob("checkpoints/ckpt-*"))[-1] / "variables"))
    routing = DynamicTable(TableSpec("user", 8, "dynamic", capacity_per_shard=1), 8, shards=3)
    stored_ids = set()
    for shard in range(3):
        base = f"model/embeddings/_dynamic_tables/user/shards/{shard}"
        stored = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
        rows = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
        used = int(reader.get_tensor(f"{base}/next_row/.ATTRIBUTES/VARIABLE_VALUE"))
        assert sorted(rows.tolist()) == list(range(used))
        assert np.all(routing.shard_of(tf.constant(stored)).numpy() == shard)
        # after eviction and re-sharding, still saved up to the rows in use only
        saved = reader.get_variable_to_shape_map()
        assert saved[f"{base}/emb/.ATTRIBUTES/VARIABLE_VALUE"] == [used, 8]
        assert saved[f"{base}/last_seen/.ATTRIBUTES/VARIABLE_VALUE"] == [used]
        stored_ids.update(stored.tolist())
    assert len(stored_ids) == len(users[1] | users[2])


def test_train_warm_start_moves_a_dynamic_table_to_more_servers(tmp_path):
    """``train --warm-start`` a new model dir on 3 parameter servers from a run on 2: every
    id of the first run keeps its vector and moves to its shard of 3, the new run admits
    its own day's ids, and its checkpoints record 3 shards."""
    import pyarrow.parquet as pq

    from recsys_dist.data.synth_files import synthesize
    from recsys_dist.models.dynamic_table import DynamicTable

    data = tmp_path / "data"
    synthesize(data, days=2, rows_per_day=4_000, seed=8, rows_per_file=2_000, users=3_000)
    users = [
        set(
            pq.read_table(data / f"dt=2026-01-0{day}", columns=["user_id"])
            .column("user_id")
            .to_pylist()
        )
        for day in (1, 2)
    ]
    config_file = write_user_run(tmp_path, data, {"capacity_per_shard": 5_000})

    def train(day: int, model_dir: str, *extra: str) -> str:
        done = command_forks.run(
            [
                CLI,
                "train",
                "--config",
                str(config_file),
                "--data",
                str(data / f"dt=2026-01-0{day}"),
                "--model-dir",
                str(tmp_path / model_dir),
                "--no-eval",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    def saved_ids(model_dir: str, shards: int) -> dict[int, np.ndarray]:
        newest = sorted((tmp_path / model_dir).glob("checkpoints/ckpt-*"))[-1]
        state = json.loads((newest / "state.json").read_text())
        assert state["signature"]["dynamic_shards"] == shards
        reader = tf.train.load_checkpoint(str(newest / "variables"))
        routing = DynamicTable(
            TableSpec("user", 8, "dynamic", capacity_per_shard=1), 8, shards=shards
        )
        vectors = {}
        for shard in range(shards):
            base = f"model/embeddings/_dynamic_tables/user/shards/{shard}"
            keys = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
            rows = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
            emb = reader.get_tensor(f"{base}/emb/.ATTRIBUTES/VARIABLE_VALUE")
            assert np.all(routing.shard_of(tf.constant(keys)).numpy() == shard)
            assert sorted(rows.tolist()) == list(range(len(emb)))
            vectors.update(zip(keys.tolist(), emb[rows]))
        return vectors

    train(1, "day1")
    first = saved_ids("day1", 2)  # keyed by the feature's ids (the hashed user ids)
    assert len(first) == len(users[0])
    out = train(2, "day2", "--warm-start", str(tmp_path / "day1"), "--set", "cluster.ps=3")
    assert "warm     start from" in out and "1 worker + 3 ps" in out, out[-3000:]
    second = saved_ids("day2", 3)
    # day 2 admitted some of its new users, and trained only the rows it read: exactly the
    # users of day 1 who are not in day 2 still have day 1's vectors
    assert set(first) < set(second) and len(second) <= len(users[0] | users[1])
    same = sum(np.array_equal(vector, second[key]) for key, vector in first.items())
    assert same == len(users[0] - users[1]), (same, len(users[0] - users[1]))
    # a model dir with a checkpoint of its own resumes it, and says the warm start is skipped
    out = train(
        2,
        "day2",
        "--warm-start",
        str(tmp_path / "day1"),
        "--set",
        "cluster.ps=3",
        "--set",
        "train.epochs=2",
    )
    source = sorted((tmp_path / "day1").glob("checkpoints/ckpt-*"))[-1]
    assert (
        "resume   from" in out
        and (f"warm     start from {source} skipped: this model dir's own checkpoint goes on")
        in out
    ), out[-3000:]


def test_passes_after_the_first_admit_no_id_seen_once(tmp_path):
    """Three passes with ``admit_after: 2`` (real servers inside the command's process):
    only the first pass counts sightings, so a user in one training row is never
    admitted, though later passes read that row again."""
    import pyarrow.parquet as pq

    from recsys_dist.data.synth_files import synthesize

    data = tmp_path / "data"
    synthesize(data, days=1, rows_per_day=6_000, seed=8, rows_per_file=3_000, users=20_000)
    users = pq.read_table(data / "dt=2026-01-01", columns=["user_id"]).column("user_id")
    counts = np.unique(users.to_numpy(), return_counts=True)[1]
    repeated, once = int(np.sum(counts >= 2)), int(np.sum(counts == 1))
    assert repeated > 0 and once > repeated  # a long tail: the bound below can be broken
    config_file = write_user_run(
        tmp_path,
        data,
        {"capacity_per_shard": 20_000, "admit_after": 2},
        data={"path": str(data), "train": {"dates": "2026-01-01"}},
        train={"epochs": 3, "steps_per_call": 5, "log_every_seconds": 1000},
    )
    run = tmp_path / "run"
    trained = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            str(config_file),
            "--model-dir",
            str(run),
            "--no-eval",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    stats = json.loads((run / "train_result.json").read_text())["dynamic_tables"]
    (user,) = stats.values()
    # admitted: seen in two batches of the first pass, so in two rows at least
    assert 0 < user["live_ids"] <= repeated, (user, repeated, once)
    assert user["admitted_this_run"] == user["live_ids"]
    # one more pass resumes the run: it still counts the ids admitted since it began
    resumed = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            str(config_file),
            "--model-dir",
            str(run),
            "--no-eval",
            "--set",
            "train.epochs=4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resume   from" in resumed.stdout
    (after,) = json.loads((run / "train_result.json").read_text())["dynamic_tables"].values()
    assert after["admitted_this_run"] == after["live_ids"] >= user["live_ids"]


PSS_STEP_SCRIPT = """
import tempfile
import numpy as np, tensorflow as tf
from recsys_dist.checkpoint.restore import create_slots
from recsys_dist.cluster.in_process import InProcessCluster
from recsys_dist.cluster.placement import placement_for
from recsys_dist.features.config import TableSpec
from recsys_dist.models.dynamic_lookup import lookup_tables
from recsys_dist.models.dynamic_table import ModelTables
from recsys_dist.models.rows_in_use import save_slots_of_rows_in_use

spec = TableSpec(name="t", dim=4, kind="dynamic", capacity_per_shard=50)
batches = [tf.constant(b, tf.int64) for b in ([1, 2, 3, 4, 5, 1, 9], [2, 7, 8, 11, 2])]

def tables(strategy, seeds):
    # a table's vectors and its linear weights sharing one id index, and their optimizer
    with strategy.scope():
        shared = ModelTables(placement_for(strategy, dynamic_shards=2))
        deep = shared.dynamic_table(spec, 4, "random_uniform", seeds[0], "deep")
        wide = shared.dynamic_table(spec, 1, "random_uniform", seeds[1], "wide")
        return deep, wide, tf.keras.optimizers.legacy.Adagrad(0.5)

def train(strategy):
    deep, wide, optimizer = tables(strategy, (1, 2))
    variables = deep.embedding_variables + wide.embedding_variables
    before = [v.numpy().copy() for v in variables]

    def replica_step(k):
        with tf.GradientTape() as tape:
            vectors = lookup_tables([deep, wide], [k, k[::-1]], training=True)
            loss = tf.add_n([tf.reduce_sum(tf.square(v + 1.0)) for v in vectors])
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    step = tf.function(lambda k: strategy.run(replica_step, (k,)))
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        for batch in batches:  # one after another: the same order as without servers
            coordinator.schedule(step, args=(batch,))
            coordinator.join()
    else:
        for batch in batches:
            step(batch)
    return before, [v.numpy() for v in variables], (deep, wide, optimizer)

def restored_copy(strategy, deep, wide, optimizer, directory):
    # a checkpoint saved from the servers holds the rows in use; restored into new tables
    # on the same servers, they come back to the front (slots too)
    save_slots_of_rows_in_use([deep, wide], [optimizer])
    prefix = tf.train.Checkpoint(deep=deep, wide=wide, optimizer=optimizer).save(
        directory + "/c")
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    deep2, wide2, optimizer2 = tables(strategy, (3, 4))
    with strategy.scope():
        create_slots(optimizer2, deep2.embedding_variables + wide2.embedding_variables)
    save_slots_of_rows_in_use([deep2, wide2], [optimizer2])
    tf.train.Checkpoint(deep=deep2, wide=wide2, optimizer=optimizer2).restore(prefix) \
        .assert_existing_objects_matched()
    rows = [v for k, v in shapes.items() if "/emb/" in k]
    assert len(rows) == 8 and all(0 < v[0] < 50 for v in rows), shapes  # rows and slots
    for old, new in zip(deep.shards + wide.shards, deep2.shards + wide2.shards):
        used = int(old.next_row.numpy())
        assert 0 < used < 50 and int(new.next_row.numpy()) == used
        for a, b in ((old.emb, new.emb), (optimizer.get_slot(old.emb, "accumulator"),
                                          optimizer2.get_slot(new.emb, "accumulator"))):
            np.testing.assert_array_equal(b.numpy()[:used], a.numpy()[:used])
    probe = tf.constant([1, 2, 7, 11, 12345], tf.int64)
    np.testing.assert_array_equal(deep2.lookup(probe).numpy(), deep.lookup(probe).numpy())
    print("restored", sum(int(s.next_row.numpy()) for s in deep2.shards))

cluster = InProcessCluster(workers=1, ps=2)
strategy = tf.distribute.ParameterServerStrategy(cluster.cluster_resolver())
on_servers = train(strategy)
in_process = train(tf.distribute.get_strategy())
for (b, a), (b0, a0) in zip(zip(*on_servers[:2]), zip(*in_process[:2])):
    np.testing.assert_array_equal(b, b0)  # the same seeds
    # a row's gradient sums at most 2 reads per step (a + b rounds alike in either order)
    # and Adagrad's update is element-wise: the same values up to the last bits
    np.testing.assert_allclose(a, a0, rtol=1e-6, atol=1e-7)
restored_copy(strategy, *on_servers[2], tempfile.mkdtemp())
changed = sum(int((np.abs(a - b).sum(axis=1) > 0).sum()) for b, a in zip(*on_servers[:2]))
print("changed rows", changed)
"""


def test_parameter_servers_train_dynamic_rows_as_one_process_does():
    """On parameter servers the step's gradients come back packed and are split on each
    server: every row read gets the update it gets without servers (a gradient lost on
    the way, e.g. to a variable wrapper of the strategy, would leave rows untrained). A
    checkpoint of the servers' rows in use restores into new tables on them."""
    done = subprocess.run(
        [sys.executable, "-c", PSS_STEP_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "18"  # 9 distinct ids, a row each in both layers
    assert "restored 9" in done.stdout  # and a checkpoint from the servers restores them


def test_a_tf_config_cluster_gives_a_dynamic_table_a_shard_per_server(tmp_path):
    """``cluster.mode: tf_config`` with one process per task, as on several machines: a
    worker and 2 parameter servers started by ``recsys-dist server`` from their
    ``TF_CONFIG``, the chief trains. The dynamic table gets a shard per server of the
    ``TF_CONFIG`` (the config's ``cluster.ps`` is 1 there, and unused), its checkpoints
    record 2 shards, and the export (no servers) restores them."""
    from recsys_dist.cluster.local import free_ports
    from recsys_dist.data.synth_files import synthesize
    from tests.support.processes import subprocess_env

    data = tmp_path / "data"
    synthesize(data, days=1, rows_per_day=3_000, seed=9, rows_per_file=1_500, users=2_000)
    config_file = write_user_run(
        tmp_path,
        data,
        {"capacity_per_shard": 5_000},
        cluster={"mode": "tf_config", "workers": 1, "ps": 1},
    )
    chief, worker, *ps = (f"127.0.0.1:{port}" for port in free_ports(4))
    spec = {"chief": [chief], "worker": [worker], "ps": ps}

    def env(job: str, index: int) -> dict[str, str]:
        return subprocess_env(
            TF_CONFIG=json.dumps({"cluster": spec, "task": {"type": job, "index": index}})
        )

    servers = [
        command_forks.popen(
            [CLI, "server"],
            env=env(job, index),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job, index in (("worker", 0), ("ps", 0), ("ps", 1))
    ]
    try:
        trained = command_forks.run(
            [
                CLI,
                "train",
                "--config",
                str(config_file),
                "--data",
                str(data),
                "--model-dir",
                str(tmp_path / "run"),
                "--no-eval",
            ],
            env=env("chief", 0),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
        assert "1 worker + 2 ps" in trained.stdout, trained.stdout[-2000:]
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.communicate(timeout=60)
    newest = sorted((tmp_path / "run").glob("checkpoints/ckpt-*"))[-1]
    assert json.loads((newest / "state.json").read_text())["signature"]["dynamic_shards"] == 2
    saved = tf.train.load_checkpoint(str(newest / "variables")).get_variable_to_shape_map()
    assert {k.split("/shards/")[1].split("/")[0] for k in saved if "/shards/" in k} == {"0", "1"}
    exported = command_forks.run(
        [
            CLI,
            "export",
            "--model-dir",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "export"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
