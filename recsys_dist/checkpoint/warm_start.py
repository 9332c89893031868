"""Warm start: a new run begins from another run's checkpoint, variable by variable.

Daily retraining starts each day from the previous day's model: embeddings, dense
weights, optimizer slots and counters, and the global step, but not the data position.
The feature config may drift between days, so this is not a plain
``tf.train.Checkpoint.read`` (which fails on the first shape that differs): each live
variable takes the value of the checkpoint's variable of the same shape at the same
place, and each table of a stack takes the rows its name had in the checkpoint
(:func:`stack_layouts`). Values are read slice by slice, one shard at a time, so a table
restores into any number of parameter servers; a dynamic table saved with another
number of shards is re-sharded (:func:`_reshard`). See docs/retrain.md#warm-start.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from recsys_dist.checkpoint.object_graph import (
    GRAPH_KEY,
    assign_rows,
    assign_value,
    is_variable,
    match_objects,
    saved_dynamic_shard,
    table_contents,
    value_key,
    variable_name,
)
from recsys_dist.errors import RecsysError
from recsys_dist.models.dynamic_table import DynamicTable
from recsys_dist.models.table_stack import TableStack


class WarmStartError(RecsysError):
    """The checkpoint cannot seed this model under the configured policy."""


@dataclasses.dataclass
class WarmStartReport:
    """What a warm start did.

    Attributes:
      restored: Variables (and slots) that took the checkpoint's value.
      fresh: Live variables with no counterpart in the checkpoint (e.g. a new table).
      ignored: Checkpoint variables no live variable took (e.g. a removed feature).
      reinitialized: Variables whose shape changed, started fresh.
    """

    restored: list[str] = dataclasses.field(default_factory=list)
    fresh: list[str] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)
    reinitialized: list[str] = dataclasses.field(default_factory=list)

    def warnings(self) -> list[str]:
        lines = []
        if self.ignored:
            lines.append(
                f"ignored {len(self.ignored)} checkpoint variable(s) the new model "
                "does not have (removed features?): " + ", ".join(self.ignored[:8])
            )
        if self.reinitialized:
            lines.append(
                f"started {len(self.reinitialized)} variable(s) fresh because their "
                "shape changed: " + ", ".join(self.reinitialized[:8])
            )
        if self.fresh:
            lines.append(
                f"{len(self.fresh)} variable(s) are new and start fresh: "
                + ", ".join(self.fresh[:8])
            )
        return lines


def stack_layouts(stacks: list[TableStack]) -> dict[str, dict[str, list[int]]]:
    """What a checkpoint records of its embedding stacks: key -> table -> [first, rows, dim]."""
    return {
        s.key: {t: [first, rows, int(s.variable.shape[1])] for t, (first, rows) in s.layout.items()}
        for s in stacks
    }


def _layer_of(stack_key: str) -> str:
    return stack_key.rsplit("/embedding/", 1)[0]


def _restore_stack(
    prefix: str,
    key: str,
    saved_shape: list[int],
    live,
    name: str,
    stack: TableStack,
    saved: dict[str, dict[str, list[int]]],
    is_slot: bool,
    on_table_resize: str,
    report: WarmStartReport,
    resized: dict[str, tuple],
) -> None:
    """Restores a stack (or one of its slots) table by table, by the saved layouts."""
    old = saved.get(stack.key)
    if old is None:  # no layout recorded: only an identical stack can be taken whole
        if list(saved_shape) == live.shape.as_list():
            assign_value(prefix, key, list(saved_shape), live)
            report.restored.append(name)
        else:
            report.reinitialized.append(name)
        return
    dim = int(live.shape[1])
    elsewhere = {
        t: entry
        for k, layout in saved.items()
        if _layer_of(k) == _layer_of(stack.key)
        for t, entry in layout.items()
    }
    for table, (first, rows) in stack.layout.items():
        where = f"{name}: table {table}"
        entry = old.get(table) or elsewhere.get(table)
        if entry is None:
            if not is_slot:
                report.fresh.append(f"table {table}")
        elif table not in old or entry[1] != rows:
            if on_table_resize == "fail":
                resized[table] = ((entry[1], entry[2]), (rows, dim))
            else:
                report.reinitialized.append(where)
        else:
            assign_rows(prefix, key, list(saved_shape), live, entry[0], first, rows)
            report.restored.append(where)


def warm_start(
    checkpoint: tf.train.Checkpoint,
    prefix: str,
    stacks: list[TableStack],
    saved_stacks: dict[str, dict[str, list[int]]],
    optimizers: list,
    on_table_resize: Literal["fail", "reinitialize"] = "fail",
    source: str = "",
) -> WarmStartReport:
    """Seeds the live objects of ``checkpoint`` from the checkpoint at ``prefix``.

    Args:
      checkpoint: The live root (same structure the checkpoint was saved with).
      prefix: The checkpoint to read (a ``variables`` prefix).
      stacks: The live model's embedding stacks; each is restored table by table. A new
        table starts fresh; a removed one is ignored with a warning; a resized one fails
        (or starts fresh under ``reinitialize``). A dense weight whose shape changed
        starts fresh, with a warning.
      saved_stacks: The checkpoint's stack layouts (:func:`stack_layouts`, recorded in
        its ``state.json``).
      optimizers: The live optimizers (their slots must exist already; their
        hyperparameters are left as configured).
      on_table_resize: What a table whose shape changed does.
      source: Name of the checkpoint, for messages.

    Raises:
      WarmStartError: a table changed size under ``on_table_resize: fail``.
    """
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(GRAPH_KEY))
    matched = match_objects(checkpoint, graph)
    stack_of = {id(s.variable): s for s in stacks}
    hyper = {
        id(v)
        for opt in optimizers
        for v in getattr(opt, "_hyper", {}).values()
        if isinstance(v, tf.Variable)
    }
    report = WarmStartReport()
    taken: set[str] = set()
    growable, handled = _restore_dynamic_tables(
        reader, graph, matched, report, source or prefix, taken
    )
    targets = _targets(graph, matched, stack_of, growable)
    resized: dict[str, tuple] = {}
    seen_stacks = set()
    for key, live, name, is_slot in targets:
        if id(live) in handled:  # a re-sharded dynamic table's, set by _reshard
            continue
        if id(live) in hyper:
            taken.add(key)
            continue
        saved_shape = shapes.get(key)
        if saved_shape is None:
            continue
        taken.add(key)
        stack = stack_of.get(id(live))
        if stack is not None:
            seen_stacks.add(stack.key)
            _restore_stack(
                prefix,
                key,
                saved_shape,
                live,
                name,
                stack,
                saved_stacks,
                is_slot,
                on_table_resize,
                report,
                resized,
            )
        else:
            _restore_variable(
                prefix, key, list(saved_shape), live, name, id(live) in growable, report
            )
    if resized:
        _fail_resized(resized, source or prefix)
    _report_unused(report, stacks, seen_stacks, saved_stacks, shapes, taken)
    return report


def _restore_variable(
    prefix: str,
    key: str,
    saved_shape: list[int],
    live: tf.Variable,
    name: str,
    growable: bool,
    report: WarmStartReport,
) -> None:
    """Restores one variable that is not a stacked table: as saved, or reinitialized."""
    if growable and saved_shape != live.shape.as_list():
        # a dynamic table's rows: its capacity may grow, its rows keep their places
        assign_rows(prefix, key, saved_shape, live, 0, 0, saved_shape[0])
        report.restored.append(name)
    elif saved_shape != live.shape.as_list():
        report.reinitialized.append(name)
    else:
        assign_value(prefix, key, saved_shape, live)
        report.restored.append(name)


def _fail_resized(resized: dict[str, tuple], source: str) -> None:
    detail = "; ".join(
        f"table {t!r} is {a[0]} x {a[1]} in {source} but {b[0]} x {b[1]} now"
        for t, (a, b) in sorted(resized.items())
    )
    raise WarmStartError(
        f"cannot warm start: {detail}. A resized table loses its rows' "
        "meaning; set retrain.on_table_resize: reinitialize to start it "
        "fresh, or keep its size"
    )


def _restore_dynamic_tables(
    reader, graph, matched: dict, report: WarmStartReport, source: str, taken: set[str]
) -> tuple[set[int], set[int]]:
    """Restores the id -> row index and admission counts of every dynamic table the
    checkpoint shares with the live model. Returns the ids of their row variables (which
    may grow: a larger ``capacity_per_shard`` keeps every row in place), and the ids of
    the live variables of re-sharded tables, which :func:`_reshard` has set.

    Raises:
      WarmStartError: a shard would hold more ids than ``capacity_per_shard``.
    """
    node_of = {id(obj): node_id for node_id, obj in matched.items()}
    _check_one_index_per_table(matched, source)
    growable: set[int] = set()
    handled: set[int] = set()
    for node_id, table in matched.items():
        if not isinstance(table, DynamicTable):
            continue
        name = table.spec.name
        lists = [
            graph.nodes[c.node_id]
            for c in graph.nodes[node_id].children
            if c.local_name == "shards"
        ]
        saved = sorted(lists[0].children, key=lambda c: int(c.local_name)) if lists else []
        if saved and len(saved) != len(table.shards):
            handled |= _reshard(
                reader, graph, matched, table, [c.node_id for c in saved], taken, source
            )
            report.restored.append(
                f"dynamic table {name}: re-sharded from {len(saved)} to {len(table.shards)} shards"
            )
            continue
        for index, shard in enumerate(table.shards):
            growable.update({id(shard.emb), id(shard.last_seen)})
            keys, rows = table_contents(reader, graph, node_of.get(id(shard.index)), taken)
            if keys is None:
                continue
            if rows.size and int(rows.max()) >= shard.capacity:
                raise WarmStartError(
                    f"cannot warm start: dynamic table {name!r} holds {rows.size:,} ids on "
                    f"shard {index} in {source}, more than capacity_per_shard "
                    f"{shard.capacity:,}; raise tables.{name}.capacity_per_shard"
                )
            shard.index.insert(keys, rows)
            counted, seen = table_contents(reader, graph, node_of.get(id(shard.counts)), taken)
            if counted is not None and counted.size:
                shard.counts.insert(counted, seen)
            report.restored.append(f"dynamic table {name} shard {index}: {keys.size:,} ids")
    return growable, handled


def _check_one_index_per_table(matched: dict, source: str) -> None:
    """Refuses a checkpoint that kept an id index per layer for a table whose layers
    share one index now (written by an earlier version): its layers' rows of one id may
    sit in different places, and one index cannot hold both.

    Raises:
      WarmStartError: two saved indexes match one live index.
    """
    saved_nodes: dict[int, set[int]] = {}
    names: dict[int, str] = {}
    for node_id, obj in matched.items():
        if isinstance(obj, DynamicTable):
            for shard in obj.shards:
                names[id(shard.index)] = obj.spec.name
        if isinstance(obj, tf.lookup.experimental.MutableHashTable):
            saved_nodes.setdefault(id(obj), set()).add(node_id)
    for live, nodes in saved_nodes.items():
        if len(nodes) > 1 and live in names:
            raise WarmStartError(
                f"cannot warm start from {source}: its dynamic table {names[live]!r} keeps "
                "an id index per layer (written by an earlier version of recsys_dist), "
                "and this version keeps one for all the layers that read the table; start "
                "the model fresh (without a warm start)"
            )


def _reshard(
    reader,
    graph,
    matched: dict,
    table: DynamicTable,
    shard_nodes: list[int],
    taken: set[str],
    source: str,
) -> set[int]:
    """Moves the ids of a dynamic table saved with ``len(shard_nodes)`` shards to the live
    table's shards; returns the ids of the live variables set.

    An id belongs to shard ``mix(id) % shards``, so each saved id, with its vector,
    optimizer slots, last-seen day and admission count, moves to its live shard and takes
    the next free row there. Each saved shard's rows are read whole for that.

    Raises:
      WarmStartError: a live shard would hold more ids than ``capacity_per_shard``.
    """
    saved = [saved_dynamic_shard(reader, graph, node_id, taken) for node_id in shard_nodes]
    keys = np.concatenate([s["keys"] for s in saved])
    target = table.shard_of(tf.constant(keys, tf.int64)).numpy()
    counted = np.concatenate([s["counted"] for s in saved])
    counted_target = table.shard_of(tf.constant(counted, tf.int64)).numpy()
    handled: set[int] = set()
    for index, shard in enumerate(table.shards):
        mine = target == index
        count = int(mine.sum())
        if count > shard.capacity:
            raise WarmStartError(
                f"cannot warm start: dynamic table {table.spec.name!r} from {source} puts "
                f"{count:,} ids on shard {index} of {len(table.shards)}, more than "
                f"capacity_per_shard {shard.capacity:,}; raise "
                f"tables.{table.spec.name}.capacity_per_shard"
            )
        rows = tf.range(count, dtype=tf.int64)
        shard.index.insert(keys[mine], rows)
        shard.next_row.assign(count)
        sets = [(shard.emb, "emb"), (shard.last_seen, "last_seen")]
        for optimizer_node, slot_name in saved[0]["slots"]:
            optimizer = matched.get(optimizer_node)
            try:
                sets.append((optimizer.get_slot(shard.emb, slot_name), (optimizer_node, slot_name)))
            except (KeyError, AttributeError):
                continue
        for variable, what in sets:
            values = np.concatenate(
                [s[what] if isinstance(what, str) else s["slots"][what] for s in saved]
            )[mine]
            variable.scatter_update(tf.IndexedSlices(tf.constant(values, variable.dtype), rows))
        mine_counted = counted_target == index
        if mine_counted.any():
            shard.counts.insert(
                counted[mine_counted], np.concatenate([s["seen"] for s in saved])[mine_counted]
            )
        handled |= {id(v) for v, _ in sets} | {
            id(shard.next_row),
            id(shard.day),
            id(shard.dropped_full),
            id(shard.waiting),
        }
    return handled


def _targets(
    graph, matched: dict, stack_of: dict, growable: set[int]
) -> list[tuple[str, object, str, bool]]:
    """``(checkpoint key, live variable, name, is a slot)`` of every variable and optimizer
    slot the live objects share with the checkpoint; a slot of a table stack is entered
    in ``stack_of`` under its stack, a slot of a dynamic table's rows in ``growable``."""
    targets = []
    for node_id, node in enumerate(graph.nodes):
        key = value_key(node)
        live = matched.get(node_id)
        if key is not None and live is not None and is_variable(live):
            targets.append((key, live, variable_name(live, key), False))
        for slot in node.slot_variables:
            original = matched.get(slot.original_variable_node_id)
            optimizer = matched.get(node_id)
            slot_key = value_key(graph.nodes[slot.slot_variable_node_id])
            if original is None or optimizer is None or slot_key is None:
                continue
            try:
                live_slot = optimizer.get_slot(original, slot.slot_name)
            except (KeyError, AttributeError):
                continue
            targets.append(
                (slot_key, live_slot, f"{variable_name(original, '?')}/{slot.slot_name}", True)
            )
            if id(original) in stack_of:
                stack_of[id(live_slot)] = stack_of[id(original)]
            if id(original) in growable:
                growable.add(id(live_slot))
    return targets


def _report_unused(
    report: WarmStartReport,
    stacks: list[TableStack],
    seen_stacks: set,
    saved_stacks: dict,
    shapes: dict,
    taken: set[str],
) -> None:
    """Adds the live tables the checkpoint lacks (fresh) and the checkpoint's tables and
    variables nothing live takes (ignored) to ``report``."""
    live_tables: dict[str, set[str]] = {}
    for stack in stacks:
        live_tables.setdefault(_layer_of(stack.key), set()).update(stack.layout)
        if stack.key not in seen_stacks:  # the checkpoint has no such stack: all fresh
            report.fresh.extend(f"table {t}" for t in stack.layout)
    for key, layout in saved_stacks.items():  # tables of a live layer no longer used
        kept = live_tables.get(_layer_of(key))
        if kept is not None:
            report.ignored.extend(f"table {t}" for t in layout if t not in kept)
    report.ignored.extend(
        sorted(
            k.split("/.ATTRIBUTES")[0]
            for k in shapes
            if k not in taken
            and k != GRAPH_KEY
            and "/.ATTRIBUTES/" in k
            and "OPTIMIZER_SLOT" not in k
            and "/.OBJECT_CONFIG" not in k
        )
    )
