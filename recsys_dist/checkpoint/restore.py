"""Reading a checkpoint back: into a training run's objects, or into a model alone.

Slots first: tf-keras' legacy optimizers restore a sharded table's slots only if they
exist before the restore (:func:`create_slots`). A model-only restore
(:func:`restore_model`, for scoring and export) checks every weight's shape against the
checkpoint before reading it, since a restore under a strategy would not notice a weight
of another shape. Where the files live and how a remote checkpoint is downloaded is
:mod:`recsys_dist.checkpoint.store`'s job.
"""

from __future__ import annotations

import collections

import tensorflow as tf

from recsys_dist import storage_io
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

    Needed before a restore: see the module docstring.
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

    A plain restore would not notice a weight of another shape under a strategy, so the
    checkpoint's model weights are first compared with the model's, shape by shape.

    Raises:
      CheckpointError: the checkpoint cannot be read, or does not fit the model (e.g. it
        was trained with other ``model.params``).
    """
    with local_prefix(saved) as local:
        try:
            reader = tf.train.load_checkpoint(local)
        except tf.errors.OpError as exc:
            raise CheckpointError(
                f"{saved.prefix}: cannot read the checkpoint: {tf_reason(exc)}"
            ) from None
        except IndexError as exc:  # a cut file: "Read less bytes than requested"
            raise CheckpointError(f"{saved.prefix}: cannot read the checkpoint: {exc}") from None
        stored = collections.Counter(
            tuple(shape)
            for key, shape in reader.get_variable_to_shape_map().items()
            if key.startswith("model/")
            and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
            and "/.OPTIMIZER_SLOT/" not in key
        )
        variables = _whole_variables(model)
        saved_whole = [v for v in variables if rows_in_use(v) is None]
        ours = collections.Counter(tuple(v.shape.as_list()) for v in saved_whole)
        # a dynamic table's rows are saved up to the rows in use: any count up to capacity
        extra, short = stored - ours, []
        for variable in variables:
            if rows_in_use(variable) is not None:
                capacity, *rest = variable.shape.as_list()
                fits = [s for s in extra if list(s[1:]) == rest and s[0] <= capacity]
                if fits:
                    extra -= collections.Counter([fits[0]])
                else:
                    short.append(variable)
        if ours - stored or extra or short:
            missing = [
                f"{v.name} {v.shape.as_list()}"
                for v in saved_whole
                if stored[tuple(v.shape.as_list())] == 0
            ]
            missing += [
                f"{v.name} [up to {v.shape[0]}, "
                f"{', '.join(map(str, v.shape.as_list()[1:]))}]".replace(", ]", "]")
                for v in short
            ]
            detail = (
                "model weight(s) with no weight of that shape in the checkpoint: "
                + ", ".join(missing)
                if missing
                else f"the checkpoint has {sum(stored.values())} model weights, the model "
                f"{len(variables)}; shapes only in the checkpoint: "
                f"{sorted(map(list, extra.elements()))}"
            )
            raise CheckpointError(
                f"{saved.directory}: does not fit the model of "
                f"{config_file} (was it trained with other model params?): "
                f"{detail}"
            )
        _read(tf.train.Checkpoint(model=model), local, saved.prefix, require_all=True)
