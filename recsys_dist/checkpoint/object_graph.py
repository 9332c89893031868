"""A checkpoint's object graph next to the live objects, read variable by variable.

``tf.train.Checkpoint`` saves an object graph (each object's children by name, each
variable's value under a checkpoint key, each optimizer slot beside its variable). These
helpers walk that graph with the live objects (:func:`match_objects`) and read saved
values a slice at a time with ``RestoreV2``, so a table restores into any number of
shards without ever being whole in memory. :mod:`recsys_dist.checkpoint.warm_start`
decides what goes where.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from recsys_dist.models.table_stack import assign_shard_rows, shard_rows

VALUE_ATTRIBUTE = "VARIABLE_VALUE"
GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def is_variable(obj) -> bool:
    return isinstance(obj, (tf.Variable, tf.__internal__.distribute.ShardedVariable))


def trackable_children(obj) -> dict:
    try:
        return dict(obj._trackable_children(save_type="checkpoint"))  # pylint: disable=protected-access
    except (AttributeError, TypeError, ValueError):
        return {}


def match_objects(root, graph) -> dict[int, object]:
    """Checkpoint node id -> live object, by walking child names from the roots."""
    matched: dict[int, object] = {}
    stack = [(root, 0)]
    while stack:
        obj, node_id = stack.pop()
        if node_id in matched:
            continue
        matched[node_id] = obj
        live_children = trackable_children(obj)
        for child in graph.nodes[node_id].children:
            live = live_children.get(child.local_name)
            if live is not None:
                stack.append((live, child.node_id))
    return matched


def value_key(node) -> str | None:
    for attribute in node.attributes:
        if attribute.name == VALUE_ATTRIBUTE:
            return attribute.checkpoint_key
    return None


def read_rows(
    prefix: str, key: str, saved_shape: list[int], first: int, count: int, dtype: tf.DType
) -> tf.Tensor:
    """Rows ``[first, first + count)`` of the checkpoint tensor ``key``."""
    spec = (
        " ".join(str(d) for d in saved_shape)
        + f" {first},{count}"
        + "".join(":-" for _ in saved_shape[1:])
    )
    return tf.raw_ops.RestoreV2(
        prefix=prefix, tensor_names=[key], shape_and_slices=[spec], dtypes=[dtype]
    )[0]


def assign_value(prefix: str, key: str, saved_shape: list[int], variable) -> None:
    """Copies the whole checkpoint tensor ``key`` into ``variable``, shard by shard."""
    if not isinstance(variable, tf.__internal__.distribute.ShardedVariable):
        value = tf.raw_ops.RestoreV2(
            prefix=prefix, tensor_names=[key], shape_and_slices=[""], dtypes=[variable.dtype]
        )[0]
        variable.assign(tf.reshape(value, variable.shape))
        return
    for shard, start, stop in shard_rows(variable):
        shard.assign(read_rows(prefix, key, saved_shape, start, stop - start, shard.dtype))


def assign_rows(
    prefix: str, key: str, saved_shape: list[int], variable, saved_first: int, first: int, rows: int
) -> None:
    """Copies checkpoint rows ``[saved_first, saved_first + rows)`` of ``key`` into rows
    ``[first, first + rows)`` of ``variable``, shard by shard."""
    for shard, start, stop in shard_rows(variable):
        a, b = max(start, first), min(stop, first + rows)
        if a < b:
            assign_shard_rows(
                shard,
                a - start,
                read_rows(prefix, key, saved_shape, saved_first + a - first, b - a, shard.dtype),
            )


def table_contents(reader, graph, node_id: int | None, taken: set[str]):
    """``(keys, values)`` numpy arrays of a saved hash table, or ``(None, None)``."""
    if node_id is None:
        return None, None
    # A hash table is one attribute, "table", saved as "<key>-keys" and "<key>-values".
    keys = {a.name: a.checkpoint_key for a in graph.nodes[node_id].attributes}
    if "table" not in keys or not reader.has_tensor(keys["table"] + "-keys"):
        return None, None
    taken.update((keys["table"] + "-keys", keys["table"] + "-values"))
    return (
        reader.get_tensor(keys["table"] + "-keys"),
        reader.get_tensor(keys["table"] + "-values"),
    )


def saved_dynamic_shard(reader, graph, node_id: int, taken: set[str]) -> dict:
    """One saved shard of a dynamic table: its ``keys``, and per key its ``emb`` row,
    ``last_seen`` day and ``slots`` rows (by (optimizer node, slot name)); its ``counted``
    ids and how often each was ``seen``."""
    children = {c.local_name: c.node_id for c in graph.nodes[node_id].children}
    keys, rows = table_contents(reader, graph, children.get("index"), taken)
    counted, seen = table_contents(reader, graph, children.get("counts"), taken)
    keys = keys if keys is not None else np.zeros([0], np.int64)
    rows = rows if rows is not None else np.zeros([0], np.int64)

    def rows_of(child: int) -> np.ndarray:
        key = value_key(graph.nodes[child])
        taken.add(key)
        return reader.get_tensor(key)[rows]

    for name in ("next_row", "day", "dropped_full", "waiting"):
        if name in children:
            taken.add(value_key(graph.nodes[children[name]]))
    slots = {
        (optimizer, slot.slot_name): rows_of(slot.slot_variable_node_id)
        for optimizer, node in enumerate(graph.nodes)
        for slot in node.slot_variables
        if slot.original_variable_node_id == children["emb"]
    }
    return {
        "keys": keys,
        "emb": rows_of(children["emb"]),
        "last_seen": rows_of(children["last_seen"]),
        "slots": slots,
        "counted": counted if counted is not None else np.zeros([0], np.int64),
        "seen": seen if seen is not None else np.zeros([0], np.int64),
    }


def variable_name(variable, default: str) -> str:
    """A variable's name for messages (a ShardedVariable's is its first shard's)."""
    if isinstance(variable, tf.__internal__.distribute.ShardedVariable):
        return variable.variables[0].name.rsplit("/part_", 1)[0]
    return getattr(variable, "name", default).split(":")[0]
