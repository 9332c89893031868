"""A checkpoint's signature: what its variables depend on (the model, its labels, each
table's shape, a dynamic table's shards), saved in its state; a run, an evaluation or an
export refuses a checkpoint written for another model, naming the difference."""

from __future__ import annotations

from recsys_dist.checkpoint.store import CheckpointError, CheckpointManager, SavedCheckpoint


def model_signature(config, dynamic_shards: int | None = None) -> dict:
    """What a checkpoint's variables depend on: model, labels and table shapes, and the
    shards of its dynamic tables (``dynamic_shards``, default ``cluster.ps``).

    Restoring into a model with another signature would put rows in the wrong places,
    so :func:`check_signature` refuses it with a message naming the difference. The
    shards are not part of that check: a model restoring the checkpoint is built with
    its count (:func:`saved_dynamic_shards`).
    """
    features = config.features
    signature = {
        "model": config.model.name,
        "labels": list(config.labels),
        "tables": {name: _table_signature(t) for name, t in sorted(features.tables.items())},
    }
    if any(t.dynamic for t in features.tables.values()):
        # a dynamic table keeps its shards (one per parameter server of the run that
        # started the model dir), and one id index for every layer that reads it
        # (checkpoints written before kept one per layer)
        signature["dynamic_shards"] = dynamic_shards or config.cluster.ps
        signature["dynamic_index"] = DYNAMIC_INDEX
    return signature


def saved_dynamic_shards(saved: SavedCheckpoint | None) -> int | None:
    """The shard count of checkpoint ``saved``'s dynamic tables (None: it has none).

    A model built to restore it needs this count (``build_from_config(config,
    dynamic_shards=...)``): an id's shard is its hash modulo the count, and the shards
    are placed round-robin on however many parameter servers there are now. Moving the
    ids to another count is a warm start's job (``checkpoint/warm_start.py``)."""
    if saved is None:
        return None
    return (saved.state.get("signature") or {}).get("dynamic_shards")


def model_dir_dynamic_shards(manager: "CheckpointManager") -> int | None:
    """:func:`saved_dynamic_shards` of a model dir's checkpoints (a resumed run keeps the
    count its model dir started with, so every readable checkpoint there has the same)."""
    for _, saved in manager.newest_first():
        if isinstance(saved, SavedCheckpoint):
            return saved_dynamic_shards(saved)
    return None


#: How a checkpoint's dynamic tables keep their id index (``model_signature``).
DYNAMIC_INDEX = "one per table"


def _table_signature(table) -> list:
    """``[rows, dim]`` of a hashed table, ``["dynamic", capacity_per_shard, dim]``."""
    if table.dynamic:
        return ["dynamic", table.capacity_per_shard, table.dim]
    return [table.rows, table.dim]


def _without_capacity(signature: list) -> list:
    """A table's signature without a dynamic table's ``capacity_per_shard``."""
    signature = list(signature)
    return [signature[0], signature[2]] if signature and signature[0] == "dynamic" else signature


def _describe_table(signature: list) -> str:
    if signature and signature[0] == "dynamic":
        return f"dynamic with capacity_per_shard {signature[1]} and dim {signature[2]}"
    return f"{signature[0]} x {signature[1]}"


def check_signature(saved: SavedCheckpoint, config, what: str = "this run") -> None:
    """Raises :class:`CheckpointError` if ``saved`` was written for another model."""
    theirs = saved.state.get("signature")
    ours = model_signature(config)

    def compared(signature: dict) -> dict:
        # neither the shards (see model_signature) nor a dynamic table's capacity: the
        # checkpoint holds its rows in use, which restore into any capacity they fit
        return {
            k: ({t: _without_capacity(v) for t, v in v.items()} if k == "tables" else v)
            for k, v in signature.items()
            if k != "dynamic_shards"
        }

    if theirs is None or compared(theirs) == compared(ours):
        return
    problems = []
    for key in ("model", "labels"):
        if theirs.get(key) != ours[key]:
            problems.append(
                f"{key} {theirs.get(key)!r} in the checkpoint, {ours[key]!r} in {config.file}"
            )
    their_tables, our_tables = theirs.get("tables", {}), ours["tables"]
    for name in sorted(set(their_tables) | set(our_tables)):
        a, b = their_tables.get(name), our_tables.get(name)
        if a is None:
            problems.append(f"table {name!r} is new in {config.features.file}")
        elif b is None:
            problems.append(
                f"table {name!r} is in the checkpoint but not in {config.features.file}"
            )
        elif _without_capacity(a) != _without_capacity(b):
            problems.append(
                f"table {name!r} is {_describe_table(a)} in the checkpoint but "
                f"{_describe_table(b)} in {config.features.file}"
            )
    if "dynamic_shards" in theirs and theirs.get("dynamic_index") != DYNAMIC_INDEX:
        problems.append(
            "its dynamic tables keep one id index per layer (written by an "
            "earlier version of recsys_dist); this version keeps one per table "
            "for all the layers that read it: start a new run"
        )
    raise CheckpointError(
        f"{saved.directory}: written for a different feature or model "
        f"config than {what}: " + "; ".join(problems)
    )
