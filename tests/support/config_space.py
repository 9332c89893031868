"""Generated end-to-end cases over the config space a user can write.

:func:`draw` turns a seed into one small but complete case: a feature config, a model
config and the Parquet data they read. It draws from what docs/config.md allows: every
feature kind (categorical ids of both dtypes, hashed or from a vocabulary; raw and
bucketized numerics; multi-valued ids from list columns and delimited strings; crosses;
behaviour sequences with and without ``side_of``), tables shared between features, hashed
and dynamic tables of different capacities and dims, every registered model with the input
groups it takes, and the strategies ``parameter_server`` (1 to 3 servers, in process),
``mirrored`` and ``multi_worker_mirrored``. The data has nulls, empty lists and lists
longer than ``max_length``. Some draws are refused on purpose (a mutation the project
refuses, :data:`REFUSALS`): ``validate`` must refuse them with exit code 2 and one
``error:`` line naming the key, and so must ``train``, never with a traceback later.

:func:`run_case` runs a case the way a user would: ``validate``, ``train --no-eval``,
``evaluate`` and ``export`` as subprocesses, then serves the export in a fresh process
that has only TensorFlow (:mod:`tests.support.serving`) and compares every served
probability with ``sigmoid`` of the logit ``evaluate`` wrote for the same row in
``predictions.parquet`` (to :data:`TOLERANCE`). The serving request is built from the same
Parquet files the way docs/export.md tells a client to: ``serving_nullable`` with
``<column>_valid`` for nulls, lists padded with their lengths and their null ids left out.

Run many cases, each with its own seed (every failure prints its seed and how to replay
it)::

    .venv/bin/python -m tests.support.config_space --cases 200 [--seed S]
    .venv/bin/python -m tests.support.config_space --seed S --cases 1     # replay one

``tests/cluster/test_generated_configs_a.py`` and ``_b.py`` run fixed seeds.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recsys_dist.config import model_params  # noqa: F401  registers the built-in models
from recsys_dist.config.model_registry import model_names, registered_model
from tests.support import command_forks
from tests.support.configs import dump_yaml, write_yaml
from tests.support.paths import CLI
from tests.support.serving import ONLY_TENSORFLOW, serving_env

#: Largest allowed difference between a served probability and evaluate's.
TOLERANCE = 1e-5
TRAIN_DATE, EVAL_DATE = "2026-01-01", "2026-01-02"
#: Seconds one command may take before the case fails as hung.
COMMAND_TIMEOUT = 600

#: Models whose tables must all have one dim (``common_dim`` in models/zoo/ranking_model.py).
ONE_DIM = ("deepfm", "dlrm")
#: Models that need a dense numeric feature.
NEEDS_DENSE = ("dlrm",)
#: Capacities per shard that dynamic tables draw from, without replacement: the tables of
#: one case always differ in capacity.
CAPACITIES = (48, 150, 400, 1200, 5000)

# ---- what is drawn --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column:
    """How the values of one Parquet column are drawn.

    Attributes:
      name: The column.
      form: ``int64``, ``int32``, ``float32``, ``float64``, ``string`` (scalars),
        ``list<int64>``, ``list<string>`` (list columns), ``delimited`` (ids joined by
        ``|``), ``weighted`` (``id:weight`` entries joined by ``|``) or ``label``.
      pool: Distinct ids (id columns), drawn Zipf-like so a few are frequent.
      text: Ids are text (``v17``) rather than large integers.
      nulls: Share of null values (of whole lists for list columns).
      null_items: Share of null ids inside lists (empty tokens in delimited strings).
      longest: Longest list drawn (more than the feature's ``max_length``).
      empty: Share of empty lists.
      nan: Share of NaN (float columns).
      aligned_with: A list column whose lists this one's match in length and nulls
        (a sequence ``side_of`` another).
    """

    name: str
    form: str
    pool: int = 0
    text: bool = False
    nulls: float = 0.0
    null_items: float = 0.0
    longest: int = 0
    empty: float = 0.0
    nan: float = 0.0
    aligned_with: str | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """One drawn case.

    Attributes:
      seed: The seed it was drawn from (``draw(seed)`` draws it again).
      features: The feature config, as data.
      config: The model config, as data, without ``data.path`` (the runner sets it).
      columns: The Parquet columns and how their values are drawn.
      vocabularies: Vocabulary file name (beside the feature config) -> its ids.
      rows: Rows of the training day and of the evaluation day.
      files: Parquet files of each day.
      refused: The key ``validate`` must name when the case is refused on purpose.
      refusal: The name of that refusal (:data:`REFUSALS`).
      covers: Short tags of what the case covers (the test id shows them).
    """

    seed: int
    features: dict
    config: dict
    columns: tuple[Column, ...]
    vocabularies: dict[str, list]
    rows: tuple[int, int]
    files: tuple[int, int]
    refused: str | None = None
    refusal: str | None = None
    covers: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        """``<seed>-<model>-<strategy>-<tags>``: a test id."""
        return "-".join([str(self.seed), *self.covers])

    def dynamic_capacities(self) -> list[int]:
        return sorted(
            t["capacity_per_shard"]
            for t in self.features["tables"].values()
            if t.get("kind") == "dynamic"
        )


def _ids(pool: int, text: bool, bits: int = 41) -> list:
    """The ``pool`` distinct ids of a column: signed integers of ``bits`` bits (so an
    int32 column holds them) or short strings."""
    if text:
        return [f"v{i}" for i in range(pool)]
    return [((i + 1) * 0x9E3779B97F4A7C15 % 2**bits) - 2 ** (bits - 1) for i in range(pool)]


def column_ids(column: Column) -> list:
    """The ids a column draws from."""
    return _ids(column.pool, column.text, 31 if column.form == "int32" else 41)


class _Draw:
    """The state of one draw: the tables, features and columns made so far."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.model = self.rng.choice(model_names())
        self.spec = registered_model(self.model)
        self.strategy = self._strategy()
        self.tables: dict[str, dict] = {}
        self.needs: dict[str, int] = {}  # hashed table -> rows its features need
        self.uses: dict[str, int] = {}  # table -> features reading it
        self.features: dict[str, dict] = {}
        self.columns: list[Column] = []
        self.vocabularies: dict[str, list] = {}
        self.capacities = list(CAPACITIES)
        self.rng.shuffle(self.capacities)
        self.dim = self.rng.choice((4, 8)) if self.model in ONE_DIM else None

    def _strategy(self) -> dict:
        kind = self.rng.choices(
            ("parameter_server", "mirrored", "multi_worker_mirrored"), (6, 2, 1)
        )[0]
        if kind == "parameter_server":
            return {
                "mode": "in_process",
                "workers": self.rng.choice((1, 2)),
                "ps": self.rng.choice((1, 2, 3)),
            }
        mode = "in_process" if kind == "mirrored" else "local"
        return {"mode": mode, "workers": 2, "ps": 1, "strategy": kind}

    @property
    def on_servers(self) -> bool:
        return "strategy" not in self.strategy

    # ---- tables ------------------------------------------------------------------
    def table(self, *, dynamic_ok: bool, need: int = 0) -> str:
        """A table for a new feature: an earlier one (shared) or a new one; dynamic only
        where the feature allows it and the strategy runs parameter servers."""
        shareable = [
            name for name, t in self.tables.items() if dynamic_ok or t.get("kind") != "dynamic"
        ]
        if shareable and self.rng.random() < 0.3:
            name = self.rng.choice(shareable)
        else:
            name = f"t{len(self.tables)}"
            dim = self.dim or self.rng.choice((2, 4, 6, 8))
            if dynamic_ok and self.on_servers and self.capacities and self.rng.random() < 0.55:
                table = {"kind": "dynamic", "dim": dim, "capacity_per_shard": self.capacities.pop()}
                if self.rng.random() < 0.2:
                    table["admit_after"] = 2
            else:
                table = {"rows": self.rng.choice((16, 61, 250, 1000, 4000)), "dim": dim}
            self.tables[name] = table
        self.needs[name] = max(self.needs.get(name, 0), need)
        self.uses[name] = self.uses.get(name, 0) + 1
        return name

    def dynamic(self, table: str) -> bool:
        return self.tables[table].get("kind") == "dynamic"

    # ---- features ----------------------------------------------------------------
    def add(self, name: str, feature: dict, *columns: Column) -> str:
        self.features[name] = feature
        self.columns.extend(columns)
        return name

    def nulls(self) -> float:
        return self.rng.choice((0.0, 0.03, 0.2))

    def categorical(self, name: str, *, target: bool = False) -> str:
        """An int64 or string id; a vocabulary or ``hash_buckets`` sometimes."""
        text = self.rng.random() < 0.5
        pool = self.rng.choice((5, 40, 300, 2000))
        feature = {"kind": "categorical", "dtype": "string" if text else "int64"}
        form = "string" if text else self.rng.choice(("int64", "int64", "int32"))
        vocabulary = not target and self.rng.random() < 0.2
        if vocabulary:
            known = column_ids(Column(name, form, pool=pool, text=text))[: max(1, pool // 2)]
            file = f"{name}.vocab"
            self.vocabularies[file] = known
            feature["vocabulary"] = file
            feature["oov_buckets"] = self.rng.choice((1, 3))
            need = len(known) + feature["oov_buckets"] + 1
            feature["table"] = self.table(dynamic_ok=False, need=need)
        else:
            feature["table"] = self.table(dynamic_ok=True, need=2)
            if not target and not self.dynamic(feature["table"]) and self.rng.random() < 0.15:
                feature["hash_buckets"] = self.rng.choice((2, 9, 16))
                self.needs[feature["table"]] = max(
                    self.needs[feature["table"]], feature["hash_buckets"]
                )
        column = Column(name, form, pool=pool, text=text, nulls=self.nulls())
        return self.add(name, feature, column)

    def numeric(self, name: str, *, dense: bool = False) -> str:
        """A raw numeric (dense) or a bucketized one (an id)."""
        nan_ok = self.rng.random() < 0.5
        form = self.rng.choice(("float32", "float32", "float64", "int32", "int64"))
        floats = form.startswith("float")
        feature = {"kind": "numeric", "nan_means_missing": nan_ok}
        if self.rng.random() < 0.5:
            feature["fill_value"] = self.rng.choice((-1.0, 0.5, 7.0))
        if dense or self.rng.random() < 0.6:
            feature["transform"] = self.rng.choice(("none", "log1p", "standardize"))
            if feature["transform"] == "standardize":
                feature.update(mean=1.5, std=self.rng.choice((0.5, 3.0)))
            feature["missing_indicator"] = self.rng.random() < 0.4
        else:
            edges = sorted(self.rng.sample((-2.0, 0.0, 0.5, 1.0, 2.5, 6.0, 20.0), 3))
            feature.update(transform="bucketize", boundaries=edges)
            feature["table"] = self.table(dynamic_ok=False, need=len(edges) + 1)
        nan = 0.05 if nan_ok and floats else 0.0
        return self.add(name, feature, Column(name, form, nulls=self.nulls(), nan=nan))

    def multi(self, name: str) -> str:
        """Several ids per row: a list column, a delimited or an ``id:weight`` string."""
        form = self.rng.choice(("list<int64>", "list<string>", "delimited", "weighted"))
        text = form != "list<int64>"
        length = self.rng.randint(1, 5)
        feature = {"kind": "multi_categorical", "max_length": length}
        feature["combiner"] = self.rng.choice(("sum", "mean", "sqrtn"))
        if form == "weighted":
            feature["weighted"] = True
        pool = self.rng.choice((8, 100, 1500))
        if text and self.rng.random() < 0.15:
            known = _ids(pool, text)[: max(1, pool // 3)]
            self.vocabularies[f"{name}.vocab"] = known
            feature["vocabulary"] = f"{name}.vocab"
            feature["table"] = self.table(dynamic_ok=False, need=len(known) + 1)
        else:
            feature["table"] = self.table(dynamic_ok=True, need=1)
        column = Column(
            name,
            form,
            pool=pool,
            text=text,
            nulls=self.nulls(),
            null_items=0.0 if form == "weighted" else self.rng.choice((0.0, 0.1)),
            longest=length + self.rng.randint(1, 3),
            empty=self.rng.choice((0.0, 0.2)),
        )
        return self.add(name, feature, column)

    def cross(self, name: str, inputs: list[str]) -> str:
        feature = {"kind": "cross", "inputs": inputs, "table": self.table(dynamic_ok=True, need=2)}
        return self.add(name, feature)

    def behaviour(self, attention: bool) -> None:
        """A candidate item, its history and sometimes the history's categories
        (``side_of``), each side with its own candidate."""
        item = self.categorical("item", target=True)
        self.history("hist_item", item, None, attention)
        if self.rng.random() < 0.6:
            cate = self.categorical("cate", target=True)
            self.history("hist_cate", cate, "hist_item", attention)

    def history(self, name: str, target: str, side_of: str | None, attention: bool) -> None:
        candidate = self.features[target]
        main = self.features.get(side_of or "")
        text = candidate["dtype"] == "string"
        form = self.rng.choice(("list<string>" if text else "list<int64>", "delimited"))
        feature = {"kind": "sequence", "table": candidate["table"], "dtype": candidate["dtype"]}
        self.uses[candidate["table"]] += 1
        feature["max_length"] = main["max_length"] if main else self.rng.randint(1, 6)
        newest = main.get("newest", "last") if main else self.rng.choice(("last", "first"))
        if newest != "last":
            feature["newest"] = newest
        if attention or self.rng.random() < 0.6:
            feature["target"] = target
        if side_of:
            feature["side_of"] = side_of
        if self.rng.random() < 0.3:
            feature["pooling"] = "sum"
        pool = next(c.pool for c in self.columns if c.name == target)
        column = Column(
            name,
            form,
            pool=pool,
            text=text,
            nulls=0.0 if side_of else self.nulls(),
            null_items=self.rng.choice((0.0, 0.1)),
            longest=feature["max_length"] + self.rng.randint(1, 3),
            empty=0.0 if side_of else self.rng.choice((0.0, 0.2)),
            aligned_with=side_of,
        )
        self.add(name, feature, column)


def _draw_features(d: _Draw) -> None:
    attention = d.spec.needs_sequence
    if attention or d.rng.random() < 0.4:
        d.behaviour(attention)
    for i in range(d.rng.randint(1, 3)):
        d.categorical(f"c{i}")
    for i in range(d.rng.randint(1 if d.model in NEEDS_DENSE else 0, 2)):
        d.numeric(f"n{i}", dense=i == 0 and d.model in NEEDS_DENSE)
    for i in range(d.rng.randint(0, 2)):
        d.multi(f"m{i}")
    categoricals = [n for n, f in d.features.items() if f["kind"] == "categorical"]
    if len(categoricals) >= 2 and d.rng.random() < 0.4:
        k = min(len(categoricals), d.rng.choice((2, 2, 3)))
        d.cross("cross", d.rng.sample(categoricals, k))


def _tables(d: _Draw) -> dict:
    """The tables with the rows their features need, in the order they were made."""
    out = {}
    for name, table in d.tables.items():
        table = dict(table)
        if "rows" in table:
            table["rows"] = max(table["rows"], d.needs[name])
        out[name] = table
    return out


def _history_dims(d: _Draw, tables: dict) -> list[int]:
    """The dim of each history position: its sequences' tables' dims summed."""
    dims = {}
    for name, feature in d.features.items():
        if feature["kind"] == "sequence":
            main = feature.get("side_of", name)
            dims[main] = dims.get(main, 0) + tables[feature["table"]]["dim"]
    return list(dims.values())


def _params(d: _Draw, tables: dict) -> dict:
    """Small hyper-parameters of the drawn model."""
    r = d.rng
    deep = {"hidden_units": [r.choice((8, 16))]}
    if r.random() < 0.2:
        deep["batch_norm"] = True
    if r.random() < 0.2:
        deep["dropout"] = 0.1
    if d.model == "dcn_v2":
        return {
            **deep,
            "cross_layers": r.randint(1, 2),
            "low_rank": r.choice((None, 4)),
            "structure": r.choice(("stacked", "parallel")),
        }
    if d.model == "dlrm":
        return {
            "bottom_units": r.choice(([], [8])),
            "top_units": [16],
            "self_interaction": r.random() < 0.5,
        }
    if d.model == "mmoe":
        return {"num_experts": 2, "expert_units": [16], "tower_units": [8]}
    if d.model == "din":
        return {
            **deep,
            "attention_units": [8],
            "attention_activation": r.choice(("dice", "prelu", "relu", "sigmoid")),
            "attention_normalization": r.choice(("none", "softmax")),
            "sequence_pooling": r.choice(("attention", "attention", "mean")),
        }
    if d.model == "bst":
        dims = _history_dims(d, tables)
        heads = [h for h in (1, 2, 4) if all(dim % h == 0 for dim in dims)]
        return {
            **deep,
            "num_heads": r.choice(heads),
            "transformer_layers": r.randint(1, 2),
            "ffn_units": r.choice((None, 8)),
        }
    return deep if "hidden_units" in {f.name for f in dataclasses.fields(d.spec.params)} else {}


def _inputs(d: _Draw) -> dict | None:
    """``model.inputs``: left out (every feature in the one group) or listed."""
    names = list(d.features)
    groups = d.spec.input_groups
    if len(groups) == 1:
        if d.rng.random() < 0.5:
            return None
        d.rng.shuffle(names)
        return {groups[0]: names}
    placed: dict[str, list[str]] = {g: [] for g in groups}
    for name in names:
        chosen = [g for g in groups if d.rng.random() < 0.6] or [d.rng.choice(groups)]
        for group in chosen:
            placed[group].append(name)
    for group in groups:
        if not placed[group]:
            placed[group].append(d.rng.choice(names))
    return placed


def _model_config(d: _Draw, tables: dict, labels: list[str]) -> dict:
    r = d.rng
    model = {"name": d.model, "labels": labels, "params": _params(d, tables)}
    inputs = _inputs(d)
    if inputs is not None:
        model["inputs"] = inputs
    workers = d.strategy["workers"]
    train = {
        "epochs": 1,
        "steps_per_call": r.choice((1, 3, 8)),
        "embedding_shard_bytes": 64,  # every table split over every server
        "log_every_seconds": 1000,
        "seed": r.randint(0, 99),
        "embedding_optimizer": {
            "name": r.choice(("adagrad", "ftrl", "sgd")),
            "learning_rate": 0.05,
        },
        "dense_optimizer": {"name": r.choice(("adam", "adagrad")), "learning_rate": 0.01},
    }
    if d.on_servers and r.random() < 0.15:
        train["dense_refresh_steps"] = 2
    return {
        "features": "features.yaml",
        "data": {"train": {"dates": TRAIN_DATE}, "eval": {"dates": EVAL_DATE}},
        "input": {
            "batch_size": r.choice((64, 128, 256)) // workers * workers,
            "shuffle": r.random() < 0.5,
        },
        "model": model,
        "train": train,
        "cluster": dict(d.strategy),
    }


def _strategy_tag(config: dict) -> str:
    """``ps<servers>`` or the synchronous strategy's name."""
    cluster = config["cluster"]
    strategy = cluster.get("strategy", "parameter_server")
    return f"ps{cluster['ps']}" if strategy == "parameter_server" else strategy


def _covers(d: _Draw, features: dict, config: dict) -> tuple[str, ...]:
    tags = [d.model, _strategy_tag(config)]
    dynamic = [t for t in features["tables"].values() if t.get("kind") == "dynamic"]
    if dynamic:
        tags.append(f"dynamic{len(dynamic)}")
    if any(n > 1 for n in d.uses.values()):
        tags.append("shared")
    kinds = [f["kind"] for f in features["features"].values()]
    if "sequence" in kinds:
        side = any("side_of" in f for f in features["features"].values())
        tags.append("sequence_side" if side else "sequence")
        forms = {c.name: c.form == "delimited" for c in d.columns}
        if side and forms["hist_item"] != forms["hist_cate"]:
            tags.append("list_and_delimited")  # the history a list, its side a string, or back
    tags += [k for k in ("cross", "multi_categorical") if k in kinds]
    if any("vocabulary" in f for f in features["features"].values()):
        tags.append("vocabulary")
    return tuple(tags)


def draw(seed: int, refuse: float = 0.15) -> Case:
    """The case of ``seed``: a config the project accepts, or with probability ``refuse``
    one mutated by a refusal of :data:`REFUSALS`."""
    d = _Draw(seed)
    _draw_features(d)
    tables = _tables(d)
    labels = ["click", "conversion"] if d.spec.min_labels > 1 or d.rng.random() < 0.2 else ["click"]
    features = {
        "tables": tables,
        "features": d.features,
        "labels": {label: {} for label in labels},
    }
    config = _model_config(d, tables, labels)
    columns = tuple(d.columns) + tuple(Column(label, "label") for label in labels)
    case = Case(
        seed,
        features,
        config,
        columns,
        d.vocabularies,
        rows=(d.rng.randint(1000, 2500), d.rng.randint(300, 700)),
        files=(d.rng.choice((1, 2)), d.rng.choice((1, 2))),
        covers=_covers(d, features, config),
    )
    if d.rng.random() < refuse:
        return _refused(case, d.rng)
    return case


# ---- refusals ---------------------------------------------------------------------


def _has_dynamic(case: Case) -> bool:
    return bool(case.dynamic_capacities())


def _mirrored_with_dynamic(case: Case, strategy: str) -> tuple[dict, dict, str]:
    config = copy.deepcopy(case.config)
    mode = "in_process" if strategy == "mirrored" else "local"
    config["cluster"] = {"mode": mode, "workers": 2, "ps": 1, "strategy": strategy}
    config["input"]["batch_size"] = 64
    config["train"].pop("dense_refresh_steps", None)
    return case.features, config, "cluster.strategy"


def _one_label_mmoe(case: Case) -> tuple[dict, dict, str]:
    config = copy.deepcopy(case.config)
    config["model"] = {"name": "mmoe", "labels": ["click"]}
    return case.features, config, "model.labels"


def _odd_batch(case: Case) -> tuple[dict, dict, str]:
    config = copy.deepcopy(case.config)
    config["cluster"] = {"mode": "in_process", "workers": 2, "ps": 1, "strategy": "mirrored"}
    config["input"]["batch_size"] = 65
    return case.features, config, "input.batch_size"


def _side_of_other_length(case: Case) -> tuple[dict, dict, str]:
    features = copy.deepcopy(case.features)
    features["features"]["hist_cate"]["max_length"] += 1
    return features, case.config, "features.hist_cate.max_length"


def _hash_buckets_on_dynamic(case: Case) -> tuple[dict, dict, str]:
    features = copy.deepcopy(case.features)
    name, feature = next(
        (n, f)
        for n, f in features["features"].items()
        if f["kind"] == "categorical" and features["tables"][f["table"]].get("kind") == "dynamic"
    )
    feature["hash_buckets"] = 8
    return features, case.config, f"features.{name}.hash_buckets"


def _misspelt_param(case: Case) -> tuple[dict, dict, str]:
    config = copy.deepcopy(case.config)
    config["model"]["params"] = {"hidden_unit": [8]}
    config["model"]["name"] = "dcn_v2"
    config["model"].pop("inputs", None)
    return case.features, config, "model.params.hidden_unit"


def _attention_without_history(case: Case) -> tuple[dict, dict, str]:
    features = copy.deepcopy(case.features)
    for name in [n for n, f in features["features"].items() if f["kind"] == "sequence"]:
        del features["features"][name]
    used = {f.get("table") for f in features["features"].values()}
    features["tables"] = {n: t for n, t in features["tables"].items() if n in used}
    config = copy.deepcopy(case.config)
    config["model"] = {"name": "din", "labels": config["model"]["labels"]}
    return features, config, "model.name"


def _two_dims_for_one_dim_model(case: Case) -> tuple[dict, dict, str]:
    features = copy.deepcopy(case.features)
    tables = [t for t in features["tables"].values()]
    tables[0]["dim"] = 4
    tables[-1]["dim"] = 2
    config = copy.deepcopy(case.config)
    config["model"] = {"name": "deepfm", "labels": config["model"]["labels"]}
    return features, config, "model.name"


def _dlrm_without_dense(case: Case) -> tuple[dict, dict, str]:
    features = copy.deepcopy(case.features)
    for table in features["tables"].values():
        table["dim"] = 4
    features["features"] = {
        n: f
        for n, f in features["features"].items()
        if f["kind"] != "numeric" or f.get("transform") == "bucketize"
    }
    config = copy.deepcopy(case.config)
    config["model"] = {"name": "dlrm", "labels": config["model"]["labels"]}
    return features, config, "model.name"


def _with_targets(case: Case) -> dict:
    """The case's features with a target on each history: ``item``'s and ``cate``'s."""
    features = copy.deepcopy(case.features)
    for name, target in (("hist_item", "item"), ("hist_cate", "cate")):
        if name in features["features"]:
            features["features"][name]["target"] = target
    return features


def _heads_not_dividing(case: Case) -> tuple[dict, dict, str]:
    features = _with_targets(case)
    dim = sum(
        features["tables"][f["table"]]["dim"]
        for n, f in features["features"].items()
        if n in ("hist_item", "hist_cate")
    )
    config = copy.deepcopy(case.config)
    config["model"] = {
        "name": "bst",
        "labels": config["model"]["labels"],
        "params": {"num_heads": dim + 1, "hidden_units": [8]},
    }
    return features, config, "model.params.num_heads"


def _history_without_target(case: Case) -> tuple[dict, dict, str]:
    features = _with_targets(case)
    del features["features"]["hist_item"]["target"]
    config = copy.deepcopy(case.config)
    config["model"] = {"name": "din", "labels": config["model"]["labels"]}
    return features, config, "model.name"


def _multi_worker_in_process(case: Case) -> tuple[dict, dict, str]:
    config = copy.deepcopy(case.config)
    config["cluster"] = {
        "mode": "in_process",
        "workers": 2,
        "strategy": "multi_worker_mirrored",
    }
    return case.features, config, "cluster.mode"


def _has_history(case: Case) -> bool:
    return "hist_item" in case.features["features"]


#: Refusal name -> (applies to the case?, the mutation: (features, config, the key named)).
REFUSALS = {
    "dynamic_under_mirrored": (_has_dynamic, lambda c: _mirrored_with_dynamic(c, "mirrored")),
    "dynamic_under_multi_worker": (
        _has_dynamic,
        lambda c: _mirrored_with_dynamic(c, "multi_worker_mirrored"),
    ),
    "one_label_mmoe": (lambda c: True, _one_label_mmoe),
    "odd_batch_mirrored": (lambda c: True, _odd_batch),
    "side_of_other_length": (
        lambda c: "hist_cate" in c.features["features"],
        _side_of_other_length,
    ),
    "hash_buckets_on_dynamic": (
        lambda c: any(
            f["kind"] == "categorical" and c.features["tables"][f["table"]].get("kind") == "dynamic"
            for f in c.features["features"].values()
        ),
        _hash_buckets_on_dynamic,
    ),
    "misspelt_param": (lambda c: True, _misspelt_param),
    "attention_without_history": (lambda c: True, _attention_without_history),
    "two_dims_for_one_dim_model": (
        lambda c: len(c.features["tables"]) >= 2,
        _two_dims_for_one_dim_model,
    ),
    "dlrm_without_dense": (lambda c: True, _dlrm_without_dense),
    "heads_not_dividing": (_has_history, _heads_not_dividing),
    "history_without_target": (_has_history, _history_without_target),
    "multi_worker_in_process": (lambda c: True, _multi_worker_in_process),
}


def _refused(case: Case, rng: random.Random) -> Case:
    names = [n for n, (applies, _) in REFUSALS.items() if applies(case)]
    name = rng.choice(names)
    features, config, key = REFUSALS[name][1](case)
    return dataclasses.replace(
        case,
        features=features,
        config=config,
        refused=key,
        refusal=name,
        covers=(config["model"]["name"], _strategy_tag(config), f"refused_{name}"),
    )


# ---- the data -----------------------------------------------------------------------


def _zipf_indices(rng: np.random.Generator, pool: int, n: int) -> np.ndarray:
    return np.minimum(rng.zipf(1.3, n) - 1, pool - 1)


def _list_lengths(rng: np.random.Generator, column: Column, n: int) -> np.ndarray:
    lengths = rng.integers(1, column.longest + 1, n)
    lengths[rng.random(n) < column.empty] = 0
    return lengths


def _lists(rng: np.random.Generator, column: Column, lengths, null_rows) -> list:
    """Python lists of ids (None for a null id), None for a null list."""
    ids = column_ids(column)
    out = []
    for length, null in zip(lengths, null_rows):
        if null:
            out.append(None)
            continue
        picks = _zipf_indices(rng, column.pool, int(length))
        nulls = rng.random(int(length)) < column.null_items
        out.append([None if z else ids[i] for i, z in zip(picks, nulls)])
    return out


def _joined(rng: np.random.Generator, column: Column, lists: list) -> list:
    """Lists as delimited strings: a null id is an empty token; ``weighted`` entries
    carry a weight."""
    out = []
    for values in lists:
        if values is None:
            out.append(None)
        elif column.form == "weighted":
            out.append("|".join(f"{v}:{rng.choice([0.5, 1, 2.25])}" for v in values))
        else:
            out.append("|".join("" if v is None else str(v) for v in values))
    return out


def _scalars(rng: np.random.Generator, column: Column, n: int) -> pa.Array:
    null = rng.random(n) < column.nulls
    if column.form in ("float32", "float64"):
        values = rng.lognormal(0.0, 1.5, n) * rng.choice([-1.0, 1.0, 1.0], n)
        values[rng.random(n) < column.nan] = np.nan
        return pa.array(values.astype(column.form), mask=null)
    if column.pool == 0:  # a numeric column of integers
        return pa.array(rng.integers(-5, 40, n).astype(column.form), mask=null)
    ids = column_ids(column)
    picks = _zipf_indices(rng, column.pool, n)
    if column.text:
        return pa.array([ids[i] for i in picks], pa.string(), mask=null)
    return pa.array(np.array([ids[i] for i in picks], np.int64).astype(column.form), mask=null)


def _labels(rng: np.random.Generator, table: dict, columns: tuple[Column, ...], n: int):
    """0/1 labels that depend on the first id column, so models have something to learn."""
    first = next((c for c in columns if c.form in ("int64", "int32", "string") and c.pool), None)
    logit = rng.normal(-0.5, 1.0, n)
    if first is not None:
        values = table[first.name].to_pylist()
        effect = {v: (zlib.crc32(str(v).encode()) % 7 - 3) / 2 for v in set(values)}
        logit += np.array([effect[v] for v in values])
    return (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)


def day_table(case: Case, day: int) -> pa.Table:
    """The Parquet rows of one day (0: training, 1: evaluation)."""
    rng = np.random.default_rng([case.seed, day])
    n = case.rows[day]
    out: dict[str, Any] = {}
    layouts: dict[str, tuple] = {}
    for column in case.columns:
        if column.form == "label":
            continue
        if column.form.startswith("list<") or column.form in ("delimited", "weighted"):
            if column.aligned_with is not None:
                lengths, null_rows = layouts[column.aligned_with]
            else:
                lengths = _list_lengths(rng, column, n)
                null_rows = rng.random(n) < column.nulls
            layouts[column.name] = (lengths, null_rows)
            lists = _lists(rng, column, lengths, null_rows)
            if column.form.startswith("list<"):
                kind = pa.string() if column.text else pa.int64()
                out[column.name] = pa.array(lists, pa.list_(kind))
            else:
                out[column.name] = pa.array(_joined(rng, column, lists), pa.string())
        else:
            out[column.name] = _scalars(rng, column, n)
    table = pa.table(out)
    for column in case.columns:
        if column.form == "label":
            table = table.append_column(column.name, pa.array(_labels(rng, out, case.columns, n)))
    return table


def write_data(case: Case, root: pathlib.Path) -> None:
    """``root/dt=<date>/part-0000<i>.parquet`` for both days, in ``case.files`` files."""
    for day, date in enumerate((TRAIN_DATE, EVAL_DATE)):
        table = day_table(case, day)
        parts = case.files[day]
        bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
        folder = root / f"dt={date}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(parts):
            piece = table.slice(bounds[i], bounds[i + 1] - bounds[i])
            pq.write_table(
                piece, folder / f"part-{i:05d}.parquet", row_group_size=max(1, piece.num_rows // 2)
            )


def write_case(case: Case, directory: pathlib.Path) -> str:
    """Writes the case's data, vocabularies and configs into ``directory``; returns the
    model config's path."""
    write_data(case, directory / "data")
    for name, ids in case.vocabularies.items():
        (directory / name).write_text("".join(f"{v}\n" for v in ids))
    write_yaml(directory / "features.yaml", case.features)
    config = copy.deepcopy(case.config)
    config["data"] = {"path": "data", **config["data"]}
    return write_yaml(directory / "config.yaml", config)


# ---- running a case -------------------------------------------------------------------


@dataclasses.dataclass
class Command:
    """One command a case ran, with its output."""

    name: str
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    seconds: float

    def text(self, tail: int = 3000) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.code} after {self.seconds:.1f} s\n"
            f"--- stdout (end)\n{self.stdout[-tail:]}\n--- stderr (end)\n{self.stderr[-tail:]}"
        )


@dataclasses.dataclass
class Outcome:
    """What running a case gave: its commands and every problem found (none: passed)."""

    case: Case
    directory: pathlib.Path
    commands: list[Command] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    max_difference: float | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems

    def run(self, name: str, *args: str, timeout: float = COMMAND_TIMEOUT) -> Command:
        argv = [CLI, name, *args]
        start = time.monotonic()
        try:
            done = command_forks.run(
                argv, capture_output=True, text=True, timeout=timeout, cwd=self.directory
            )
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code = -999
            stdout = _text(exc.stdout)
            stderr = _text(exc.stderr) + f"\n(killed after {timeout} s)"
        command = Command(name, argv, code, stdout, stderr, time.monotonic() - start)
        self.commands.append(command)
        return command

    def report(self) -> str:
        """The case, its configs and its commands' output: a failure message."""
        features = dump_yaml(self.case.features)
        config = dump_yaml(self.case.config)
        return "\n".join(
            [
                f"case {self.case.description} (replay: .venv/bin/python -m "
                f"tests.support.config_space --seed {self.case.seed} --cases 1)",
                f"files in {self.directory}",
                *[f"problem: {p}" for p in self.problems],
                "--- features.yaml",
                features,
                "--- config.yaml",
                config,
                *[c.text() for c in self.commands],
            ]
        )


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _check_refused(outcome: Outcome, config: str) -> None:
    """``validate``, then ``train``: exit 2 with one ``error:`` line naming the key."""
    key = outcome.case.refused
    model_dir = str(outcome.directory / "run")
    for name, args in (
        ("validate", ("--config", config)),
        ("train", ("--config", config, "--model-dir", model_dir, "--no-eval")),
    ):
        command = outcome.run(name, *args)
        lines = command.stderr.strip().splitlines()
        if command.code != 2:
            outcome.problems.append(
                f"{name} of a config refused for {key} exited {command.code}, not 2"
            )
        elif len(lines) != 1 or not lines[0].startswith("error: ") or f" {key}:" not in lines[0]:
            outcome.problems.append(
                f"{name} must refuse the config with one 'error:' line naming {key}; "
                f"stderr: {command.stderr[-1500:]}"
            )
        if outcome.problems:
            return


def run_case(case: Case, directory: pathlib.Path, *, validate: bool = True) -> Outcome:
    """Runs ``case`` in ``directory``: its refusal, or validate (unless ``validate`` is
    false), train, evaluate, export and serving, comparing the predictions."""
    start = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    config = write_case(case, directory)
    outcome = Outcome(case, directory)
    try:
        if case.refused is not None:
            _check_refused(outcome, config)
        else:
            _run_valid(outcome, config, validate)
    finally:
        outcome.seconds = time.monotonic() - start
    return outcome


def _run_valid(outcome: Outcome, config: str, validate: bool) -> None:
    d = outcome.directory
    steps = [
        ("train", "--config", config, "--model-dir", str(d / "run"), "--no-eval"),
        ("evaluate", "--config", config, "--model-dir", str(d / "run"), "--out", str(d / "eval")),
        ("export", "--config", config, "--model-dir", str(d / "run"), "--out", str(d / "export")),
    ]
    if validate:
        steps.insert(0, ("validate", "--config", config))
    for name, *args in steps:
        command = outcome.run(name, *args, *(["--quiet"] if name == "evaluate" else []))
        if command.code != 0:
            outcome.problems.append(f"{name} exited {command.code}")
            return
    compare_served(outcome)


# ---- serving the export ---------------------------------------------------------------

SERVE_SCRIPT = (
    ONLY_TENSORFLOW
    + r"""
import json
import numpy as np
import tensorflow as tf

export_dir, request_file, out_file = sys.argv[1:4]
request = dict(np.load(request_file))
serve = tf.saved_model.load(export_dir).signatures["serving_nullable"]
names = set(serve.structured_input_signature[1])
result = {"missing": sorted(names - set(request)), "extra": sorted(set(request) - names)}
if not result["missing"]:
    out = serve(**{name: tf.constant(request[name]) for name in names})
    result["outputs"] = {k: v.numpy().astype(float).tolist() for k, v in out.items()}
result["imported"] = [m for m in ("recsys_dist", "tf_keras", "pyarrow", "yaml") if m in sys.modules]
with open(out_file, "w") as handle:
    json.dump(result, handle)
"""
)

#: Serving dtype name -> numpy dtype of the request array.
NUMPY = {
    "int32": np.int32,
    "int64": np.int64,
    "float32": np.float32,
    "float64": np.float64,
    "bool": np.bool_,
    "string": np.str_,
}


def _kept_positions(lists: list[list | None]) -> list[list[int]]:
    """Per row, the positions where no list of an aligned group has a null id."""
    out = []
    for row in zip(*lists):
        width = max((len(v) for v in row if v is not None), default=0)
        out.append(
            [
                p
                for p in range(width)
                if all(v is not None and p < len(v) and v[p] is not None for v in row)
            ]
        )
    return out


def _aligned_groups(case: Case) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for column in case.columns:
        if column.aligned_with is not None:
            groups.setdefault(column.aligned_with, [column.aligned_with]).append(column.name)
    return list(groups.values())


def _list_values(case: Case, table: pa.Table) -> dict[str, list]:
    """Each list column's rows as a client sends them: null ids left out, and in an
    aligned group (a sequence and its sides) every position where any of them has a null
    id left out of all of them, as training drops it."""
    values = {}
    for column in case.columns:
        if column.form.startswith("list<"):
            values[column.name] = [
                None if v is None else [x for x in v if x is not None]
                for v in table[column.name].to_pylist()
            ]
    for group in _aligned_groups(case):
        raw = {}
        for name in group:
            rows = table[name].to_pylist()
            if isinstance(table[name].type, pa.ListType):
                raw[name] = rows
            else:  # a delimited string: an empty token is a null id
                raw[name] = [None if s is None else [t or None for t in s.split("|")] for s in rows]
        keep = _kept_positions([raw[n] for n in group])
        for name in group:
            kept = [None if v is None else [v[p] for p in k] for v, k in zip(raw[name], keep)]
            if isinstance(table[name].type, pa.ListType):
                values[name] = kept
            else:
                values[name] = [None if v is None else "|".join(map(str, v)) for v in kept]
    return values


def serving_request(case: Case, table: pa.Table, inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """The ``serving_nullable`` request for every row of ``table``: one array per input
    of the export (``inputs``: column -> dtype), ``<column>_valid`` per scalar column,
    lists padded to ``[N, L]`` with ``<column>_lengths``."""
    lists = _list_values(case, table)
    request = {}
    for column, dtype in inputs.items():
        if dtype.startswith("list<"):
            element = NUMPY[dtype[5:-1]]
            rows = [v or [] for v in lists[column]]
            width = max(1, max(len(v) for v in rows))
            pad = "" if element is np.str_ else 0
            request[column] = np.array([v + [pad] * (width - len(v)) for v in rows], element)
            request[column + "_lengths"] = np.array([len(v) for v in rows], np.int64)
            continue
        values = lists[column] if column in lists else table[column].to_pylist()
        valid = np.array([v is not None for v in values])
        zero = "" if NUMPY[dtype] is np.str_ else 0
        request[column] = np.array([zero if v is None else v for v in values], NUMPY[dtype])
        request[column + "_valid"] = valid
    return request


def _evaluated(outcome: Outcome) -> tuple[list[str], pa.Table]:
    directory = outcome.directory / "eval"
    metrics = json.loads((directory / "metrics.json").read_text())
    return metrics["data"], pq.read_table(directory / "predictions.parquet")


def compare_served(outcome: Outcome) -> None:
    """Serves every evaluated row in a plain TensorFlow process and compares each
    probability with ``sigmoid`` of evaluate's logit for that row."""
    d = outcome.directory
    files, predictions = _evaluated(outcome)
    table = pa.concat_tables([pq.read_table(f) for f in files])
    row_ids = np.concatenate(
        [(i << 32) | np.arange(pq.ParquetFile(f).metadata.num_rows) for i, f in enumerate(files)]
    )
    info = json.loads((d / "export" / "assets.extra" / "export.json").read_text())
    np.savez(d / "request.npz", **serving_request(outcome.case, table, info["inputs"]))
    (d / "serve.py").write_text(SERVE_SCRIPT)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(d / "serve.py"), str(d / "export"), "request.npz", "served.json"],
        capture_output=True,
        text=True,
        cwd=d,
        env=serving_env(),
        timeout=COMMAND_TIMEOUT,
    )
    argv = ["python", "serve.py", "export", "request.npz", "served.json"]
    serve = Command(
        "serve", argv, done.returncode, done.stdout, done.stderr, time.monotonic() - start
    )
    outcome.commands.append(serve)
    if serve.code != 0:
        outcome.problems.append(f"the serving process exited {serve.code}")
        return
    served = json.loads((d / "served.json").read_text())
    _compare(outcome, served, predictions, row_ids)


def _compare(outcome: Outcome, served: dict, predictions: pa.Table, row_ids: np.ndarray) -> None:
    problems = outcome.problems
    if served["missing"] or served["extra"]:
        problems.append(
            f"the request does not fit the signature: missing {served['missing']}, "
            f"not taken {served['extra']}"
        )
        return
    if served["imported"]:
        problems.append(f"the serving process imported {served['imported']}")
    ids = predictions["row_id"].to_numpy()
    order = np.argsort(ids)
    if not np.array_equal(ids[order], np.sort(row_ids)):
        problems.append(f"evaluate scored {len(ids)} rows, not each of the {len(row_ids)} once")
        return
    if not np.all(predictions["weight"].to_numpy() == 1):
        problems.append("evaluate gave some rows weight 0 (bad data) in data with none")
    position = np.searchsorted(row_ids, ids)  # row_ids ascend: file by file, row by row
    worst = 0.0
    for label in (c[len("logit_") :] for c in predictions.column_names if c.startswith("logit_")):
        logits = predictions[f"logit_{label}"].to_numpy().astype(np.float64)
        expected = 0.5 * (1 + np.tanh(logits / 2))  # the sigmoid, without overflow
        got = np.asarray(served["outputs"].get(label, []), np.float64)
        if got.shape != row_ids.shape:
            problems.append(f"served {got.shape} values for {label}, not {row_ids.shape}")
            continue
        difference = np.abs(got[position] - expected)
        worst = max(worst, float(np.nanmax(difference, initial=0.0)))
        bad = np.flatnonzero(~(difference <= TOLERANCE))
        if bad.size:
            i = bad[0]
            problems.append(
                f"{label}: {bad.size} of {len(ids)} served probabilities differ from "
                f"evaluate's by more than {TOLERANCE} (largest {np.nanmax(difference):.3g}); "
                f"row {ids[i] >> 32}:{ids[i] & 0xFFFFFFFF} served {got[position][i]:.7f}, "
                f"evaluate {expected[i]:.7f}"
            )
    outcome.max_difference = worst


# ---- the fixed seeds of the cluster tests ---------------------------------------------

#: The seeds ``tests/cluster/test_generated_configs_a.py`` and ``_b.py`` run (two modules
#: of about 4 minutes each), each with tags of :attr:`Case.covers` it was chosen for: a
#: change of :func:`draw` that makes a seed draw something else fails a test of module
#: ``a`` rather than quietly testing less.
FIXED_SEEDS = {
    "a": {
        332: ("dcn_v2", "ps3", "dynamic2", "shared", "sequence"),
        558: ("din", "mirrored", "sequence_side", "cross", "vocabulary"),  # of strings
        150: ("mmoe", "multi_worker_mirrored", "sequence", "vocabulary"),  # of strings
        2: ("lr", "ps1", "dynamic2", "cross", "multi_categorical", "vocabulary"),
        159: ("din", "mirrored", "refused_dynamic_under_mirrored"),
    },
    "b": {
        182: ("bst", "ps2", "dynamic2", "shared", "sequence_side", "cross"),
        168: ("wide_deep", "ps1", "dynamic3", "shared", "multi_categorical"),
        213: ("deepfm", "ps1", "dynamic2", "shared", "sequence_side"),
        218: ("dlrm", "ps2", "dynamic2", "sequence_side"),
        22: ("deepfm", "ps1", "refused_two_dims_for_one_dim_model"),
        197: ("dien", "ps1", "dynamic2", "sequence_side", "list_and_delimited"),
    },
}


def must_cover() -> set[str]:
    """The tags the fixed seeds must cover between them: every model, every strategy,
    1 to 3 servers, two and three dynamic tables, shared tables, a sequence with a side
    (stored as a list and a delimited string), and a refusal of each kind of check."""
    return {
        *model_names(),
        *("ps1", "ps2", "ps3", "mirrored", "multi_worker_mirrored"),
        *("dynamic2", "dynamic3", "shared", "sequence_side", "list_and_delimited"),
        *("cross", "multi_categorical", "vocabulary"),
        *("refused_dynamic_under_mirrored", "refused_two_dims_for_one_dim_model"),
    }


# ---- many cases from the command line -------------------------------------------------


def _line(outcome: Outcome) -> str:
    case = outcome.case
    status = "ok  " if outcome.passed else "FAIL"
    extra = (
        f", max |diff| {outcome.max_difference:.1e}" if outcome.max_difference is not None else ""
    )
    first = f": {outcome.problems[0]}" if outcome.problems else ""
    times = " ".join(f"{c.name} {c.seconds:.0f}" for c in outcome.commands)
    return (
        f"{status} seed {case.seed} {case.description} ({outcome.seconds:.0f} s: {times}{extra})"
        f"{first}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.config_space",
        description="Draw configs from the config space and run each end to end "
        "(validate, train, evaluate, export, serve); print the seed of every failure.",
    )
    parser.add_argument("--cases", type=int, default=200, help="cases to run (default 200)")
    parser.add_argument(
        "--seed", type=int, help="seed of the first case; case i has seed S + i (default: random)"
    )
    parser.add_argument(
        "--refuse",
        type=float,
        default=0.15,
        help="share of cases mutated into a config the project refuses (default 0.15)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        help="start no case after this many minutes (default: no limit)",
    )
    parser.add_argument(
        "--work",
        help="directory for the cases' files (default: a new temporary one); a passed "
        "case's files are removed, a failed one's kept",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="config_space_"))
    print(f"{args.cases} cases from seed {seed}; files in {work}", flush=True)
    failed, ran = [], 0
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else math.inf
    for s in range(seed, seed + args.cases):
        if time.monotonic() > deadline:
            print(f"stopped after {args.minutes:g} minutes", flush=True)
            break
        outcome = run_case(draw(s, args.refuse), work / f"seed-{s}")
        ran += 1
        print(_line(outcome), flush=True)
        if outcome.passed:
            shutil.rmtree(outcome.directory, ignore_errors=True)
        else:
            (outcome.directory / "report.txt").write_text(outcome.report())
            failed.append(outcome)
    print(f"{ran - len(failed)} of {ran} cases passed", flush=True)
    for outcome in failed:
        print(
            f"failed seed {outcome.case.seed}: {outcome.problems[0]}; report "
            f"{outcome.directory / 'report.txt'}; replay: .venv/bin/python -m "
            f"tests.support.config_space --seed {outcome.case.seed} --cases 1"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
