"""Reading a checkpoint back: into a training run's objects, or into a model alone.

Slots first: tf-keras' legacy optimizers restore a sharded table's slots only if they
exist before the restore (:func:`create_slots`). A model-only restore
(:func:`restore_model`, for scoring and export) pairs every weight with the checkpoint's
by its checkpoint key and checks the shapes before reading it, since a restore under a
strategy would not notice a weight of another shape. Where the files live and how a
remote checkpoint is downloaded is :mod:`recsys_dist.checkpoint.store`'s job.
"""

from __future__ import annotations

import collections

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from recsys_dist import storage_io
from recsys_dist.checkpoint.object_graph import (
    GRAPH_KEY,
    is_variable,
    match_objects,
    trackable_children,
    value_key,
    variable_name,
)
from recsys_dist.checkpoint.store import (
    CheckpointError,
    SavedCheckpoint,
    io_options,
    local_prefix,
    tf_reason,
)
from recsys_dist.models.rows_in_use import RowsBeyondCapacity, rows_in_use


def create_slots(optimizer, variables: list) -> None:
    """Creates ``optimizer``'s slots for ``variables`` now (call under the strategy scope).

    Needed before a restore (see the module docstring): otherwise a resumed Adagrad
    would silently restart from its initial accumulator.
    """
    optimizer._create_all_weights(variables)  # pylint: disable=protected-access


def restore(
    checkpoint: tf.train.Checkpoint, saved: SavedCheckpoint | str, require_all: bool = False
) -> None:
    """Reads a checkpoint into ``checkpoint``'s objects (slots must already exist).

    Args:
      saved: The checkpoint, or its variables prefix (local or remote).
      require_all: Every live object must take a value from the checkpoint (for a
        model-only root, e.g. scoring); else the checkpoint is refused.
    """
    prefix = saved.prefix if isinstance(saved, SavedCheckpoint) else saved
    with local_prefix(saved) as local:
        _read(checkpoint, local, prefix, require_all)


def _read(checkpoint: tf.train.Checkpoint, local: str, prefix: str, require_all: bool) -> None:
    """Reads the checkpoint at local prefix ``local``; messages name ``prefix``."""
    downloaded = storage_io.is_remote(prefix)  # then on this process's disk only
    try:
        status = checkpoint.read(local, options=io_options() if downloaded else None)
        if require_all:
            status.assert_existing_objects_matched()
        status.expect_partial()
    except tf.errors.OpError as exc:
        raise CheckpointError(f"{prefix}: cannot read the checkpoint: {tf_reason(exc)}") from None
    except IndexError as exc:  # TensorFlow's reader on a cut file: "Read less bytes ..."
        raise CheckpointError(f"{prefix}: cannot read the checkpoint: {exc}") from None
    except RowsBeyondCapacity as exc:
        raise CheckpointError(f"{prefix}: {exc}") from None
    except (AssertionError, ValueError) as exc:
        raise CheckpointError(
            f"{prefix}: does not fit this model (model.params or the "
            f"feature config differ from the run that wrote it): "
            f"{str(exc).splitlines()[0][:300]}"
        ) from None


def _whole_variables(model) -> list:
    """``model``'s variables as saved: a sharded table counts once, whole."""
    found, seen = [], set()
    for variable in model.variables:
        container = getattr(variable, "_sharded_container", None)
        whole = container() if container is not None else variable
        if id(whole) not in seen:
            seen.add(id(whole))
            found.append(whole)
    return found


def restore_model(model, saved: SavedCheckpoint, config_file: str) -> None:
    """Restores a model's weights alone (scoring, export) and checks every weight fits.

    A plain restore would not notice a weight of another shape under a strategy, so each
    of the model's weights is first paired with the checkpoint's by its checkpoint key
    (the object path, e.g. ``model/deep/stack/0/kernel``) and their shapes compared. A
    dynamic table's rows are saved up to its rows in use, so such a weight fits any saved
    row count up to its capacity (same trailing shape).

    Raises:
      CheckpointError: the checkpoint cannot be read, or does not fit the model (e.g. it
        was trained with other ``model.params``); the message names every weight that is
        missing, extra or of another shape, with both shapes.
    """
    with local_prefix(saved) as local:
        try:
            reader = tf.train.load_checkpoint(local)
            graph = trackable_object_graph_pb2.TrackableObjectGraph()
            graph.ParseFromString(reader.get_tensor(GRAPH_KEY))
        except tf.errors.OpError as exc:
            raise CheckpointError(
                f"{saved.prefix}: cannot read the checkpoint: {tf_reason(exc)}"
            ) from None
        except IndexError as exc:  # a cut file: "Read less bytes than requested"
            raise CheckpointError(f"{saved.prefix}: cannot read the checkpoint: {exc}") from None
        problems = weight_mismatches(model, reader, graph)
        if problems:
            raise CheckpointError(
                f"{saved.directory}: does not fit the model of {config_file} (was it "
                f"trained with other model params or another feature config?): "
                + "; ".join(problems)
            )
        _read(tf.train.Checkpoint(model=model), local, saved.prefix, require_all=True)


def _shape_text(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _key_path(key: str) -> str:
    """A checkpoint key as the object path it names (``model/head/kernel``)."""
    return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")


def _live_paths(model) -> dict[int, str]:
    """Each variable reachable from ``model`` -> its object path as a checkpoint of
    ``tf.train.Checkpoint(model=model)`` would name it (``model/deep/stack/0/kernel``)."""
    paths: dict[int, str] = {}
    queue = collections.deque([(model, "model")])
    seen = {id(model)}
    while queue:
        obj, path = queue.popleft()
        if is_variable(obj):
            paths.setdefault(id(obj), path)
            continue
        for name, child in trackable_children(obj).items():
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((child, f"{path}/{name}"))
    return paths


def weight_mismatches(model, reader, graph) -> list[str]:
    """What keeps the checkpoint read by ``reader`` (object graph ``graph``) from
    restoring ``model``: each weight paired with the saved one of the same checkpoint key,
    never by shape. Returns one line per kind of problem (empty if it fits):
    weights of another shape (both shapes), weights the checkpoint lacks, and saved model
    weights the model lacks."""
    shapes = reader.get_variable_to_shape_map()
    matched = match_objects(tf.train.Checkpoint(model=model), graph)
    key_of = {}
    for node_id, obj in matched.items():
        key = value_key(graph.nodes[node_id]) if is_variable(obj) else None
        if key is not None:
            key_of[id(obj)] = key
    wrong, missing, taken = [], [], set()
    for variable in _whole_variables(model):
        key = key_of.get(id(variable))
        live = variable.shape.as_list()
        if key is None or key not in shapes:
            missing.append(variable)
            continue
        taken.add(key)
        stored = list(shapes[key])
        if rows_in_use(variable) is not None:  # rows saved up to the rows in use
            fits = stored[1:] == live[1:] and len(stored) == len(live) and stored[0] <= live[0]
            expected = f"[up to {live[0]}" + "".join(f", {d}" for d in live[1:]) + "]"
        else:
            fits, expected = stored == live, _shape_text(live)
        if not fits:
            wrong.append(
                f"{_key_path(key)} is {_shape_text(stored)} in the checkpoint, "
                f"{expected} in the model"
            )
    extra = sorted(
        f"{_key_path(key)} {_shape_text(shape)}"
        for key, shape in shapes.items()
        if key.startswith("model/")
        and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
        and "/.OPTIMIZER_SLOT/" not in key
        and key not in taken
    )
    problems = []
    if wrong:
        problems.append("weight(s) of another shape: " + ", ".join(wrong))
    if missing:  # no key names them: their paths in the live model do
        path_of = _live_paths(model)
        problems.append(
            "model weight(s) not in the checkpoint: "
            + ", ".join(
                f"{path_of.get(id(v)) or variable_name(v, '?')} {_shape_text(v.shape.as_list())}"
                for v in missing
            )
        )
    if extra:
        problems.append("checkpoint weight(s) the model does not have: " + ", ".join(extra))
    return problems
