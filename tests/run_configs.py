"""The small training configs the cluster tests share, written as files next to their data.

- :func:`small_run_config`: DCN-v2 on 2 days of 12k rows, 2 epochs, a checkpoint every
  ``EVERY`` steps (fault tolerance, evaluation, offline evaluation, retraining);
- :func:`zoo_config`: any model of the zoo on a tiny feature config (training, the
  dense-weight cache).
"""

from __future__ import annotations

import pathlib
import textwrap

EVERY = 30  # checkpoint_every_steps: a kill replays up to this many steps (+ in flight)
EPOCHS = 2

SMALL_FEATURES = """\
tables:
  huge: {rows: 2000000, dim: 8}   # big enough that a checkpoint write takes a while
  big: {rows: 4000, dim: 8}
  small: {rows: 300, dim: 8}
  tag: {rows: 500, dim: 8}
features:
  I1: {kind: numeric, transform: log1p, nan_means_missing: true}
  I5: {kind: numeric, transform: log1p, nan_means_missing: true}
  C3: {kind: categorical, dtype: int64, table: big}
  C4: {kind: categorical, dtype: int64, table: big}
  C2: {kind: categorical, dtype: int64, table: small}
  C17: {kind: categorical, dtype: int64, table: small}
  C21: {kind: categorical, dtype: string, table: huge}
  user_id: {kind: categorical, dtype: int64, table: big}
  tags: {kind: multi_categorical, table: tag, max_length: 4}
labels:
  click: {}
"""


def small_run_config(tmp: pathlib.Path, data: pathlib.Path, mode: str = "local") -> str:
    (tmp / "features.yaml").write_text(SMALL_FEATURES)
    path = tmp / "ft.yaml"
    path.write_text(textwrap.dedent(f"""\
        features: features.yaml
        data:
          path: {data}
          train: {{dates: 2026-01-01..2026-01-02}}
          eval: {{dates: 2026-01-03}}
        input: {{batch_size: 256}}
        model:
          name: dcn_v2
          labels: [click]
          params: {{cross_layers: 1, low_rank: 8, hidden_units: [32, 16]}}
        train:
          embedding_optimizer: {{name: adagrad, learning_rate: 0.1}}
          dense_optimizer: {{name: adam, learning_rate: 0.003}}
          steps_per_call: 10
          epochs: {EPOCHS}
          checkpoint_every_steps: {EVERY}
          keep_checkpoints: 2
          log_every_seconds: 0
          embedding_shard_bytes: 1024
        cluster: {{mode: {mode}, workers: 2, ps: 2}}
        """))
    return str(path)


ZOO_FEATURES = """\
tables:
  big: {rows: 4000, dim: 8}
  small: {rows: 300, dim: 8}
  tag: {rows: 500, dim: 8}
  cross: {rows: 2000, dim: 8}
features:
  I1: {kind: numeric, transform: log1p, nan_means_missing: true}
  I5: {kind: numeric, transform: log1p, nan_means_missing: true}
  C3: {kind: categorical, dtype: int64, table: big}
  C4: {kind: categorical, dtype: int64, table: big}
  C2: {kind: categorical, dtype: int64, table: small}
  C17: {kind: categorical, dtype: int64, table: small}
  C21: {kind: categorical, dtype: string, table: big}
  user_id: {kind: categorical, dtype: int64, table: big}
  tags: {kind: multi_categorical, table: tag, max_length: 4}
  C2_x_C17: {kind: cross, inputs: [C2, C17], table: cross}
labels:
  click: {}
  conversion: {}
"""


def zoo_config(tmp: pathlib.Path, data: pathlib.Path, model: str, **extra: str) -> str:
    (tmp / "features.yaml").write_text(ZOO_FEATURES)
    labels = "[click, conversion]" if model == "mmoe" else "[click]"
    inputs = ("\n  inputs: {wide: [C3, C4, C2, C17, C21, user_id, C2_x_C17], "
              "deep: [I1, I5, C3, C4, C2, C17, C21, user_id, tags]}"
              if model == "wide_deep" else "")
    params = {"lr": "{}", "wide_deep": "{hidden_units: [32, 16]}",
              "deepfm": "{hidden_units: [32, 16]}",
              "dcn_v2": "{cross_layers: 2, low_rank: 8, hidden_units: [32, 16]}",
              "dlrm": "{bottom_units: [16], top_units: [32, 16]}",
              "mmoe": "{num_experts: 2, expert_units: [32], tower_units: [16]}"}[model]
    text = textwrap.dedent(f"""\
        features: features.yaml
        data:
          path: {data}
          train: {{dates: 2026-01-01..2026-01-02}}
          eval: {{dates: 2026-01-03}}
        input: {{batch_size: 256}}
        model:
          name: {model}
          labels: {labels}
          params: {params}""") + inputs + "\n" + textwrap.dedent(f"""\
        train:
          embedding_optimizer: {{name: adagrad, learning_rate: 0.1}}
          dense_optimizer: {{name: adam, learning_rate: 0.003}}
          steps_per_call: 10
          epochs: {extra.get("epochs", 2)}
          embedding_shard_bytes: 1024
          log_every_seconds: 1000
        cluster: {{mode: local, workers: 2, ps: 2}}
        """)
    path = tmp / f"{model}.yaml"
    path.write_text(text)
    return str(path)
