"""Reading the dense weights from the parameter servers every N steps instead of every step.

A training step reads every dense variable from the parameter servers and sends its
gradient back; for a small model that is most of what a step moves. With
``train.dense_refresh_steps: N`` a worker computes its steps from a copy of the dense
weights read when a call starts and then every ``N`` steps. Every gradient is still
applied at once, so no update is lost or delayed; a step's weights miss at most the
``N - 1`` previous steps of its own worker. Embedding rows are never cached, and
``N = 1`` is the exact behaviour through the same code path. See
docs/training.md#reading-the-dense-weights-less-often.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import tensorflow as tf
from tensorflow.python.distribute import distribute_utils, ps_values

from recsys_dist.errors import ConfigError


def check_dense_refresh(config_file: str, refresh_steps: int | None, replicas: int) -> None:
    """Raises ConfigError when ``train.dense_refresh_steps`` cannot apply: the cache is
    built for one replica per worker (a CPU worker); several GPUs per worker are not
    supported (nor testable on this project's machines)."""
    if refresh_steps is not None and replicas > 1:
        raise ConfigError(
            config_file,
            "train.dense_refresh_steps",
            f"{refresh_steps} is not supported with {replicas} replicas per "
            "worker (one per GPU); set it to null",
        )


def caching_variable(variable: tf.Variable) -> ps_values.CachingVariable:
    """The ``CachingVariable`` ParameterServerStrategy keeps for ``variable``, whose reads
    the cache redirects.

    Raises:
      ValueError: ``variable`` was not created under a ParameterServerStrategy scope.
    """
    if isinstance(variable, ps_values.AggregatingVariable):
        variable = variable.get()
    if not isinstance(variable, ps_values.CachingVariable):
        raise ValueError(
            f"train.dense_refresh_steps needs ParameterServerStrategy variables; "
            f"{variable.name} is a {type(variable).__name__}"
        )
    return variable


class DenseWeightCache:
    """A worker's copy of the dense weights inside one traced training call.

    ParameterServerStrategy wraps every variable in a ``CachingVariable``, whose reads,
    inside TensorFlow's ``cache_variable_reads()`` scope, return a cached local copy. This
    opens that scope around the training loop, reads the dense weights before the loop
    and re-reads them every ``refresh_steps`` steps inside it (a loop variable), and
    points each variable's cache at the current copy. Because the model then reads
    tensors, not variables, the step takes the dense gradients with respect to those
    tensors (:func:`watched`).

    Use inside a ``tf.function`` being traced::

        cache = DenseWeightCache(model.dense_variables, refresh_steps)
        with cache.scope() as copies:          # read once, before the loop
            for step in tf.range(n):
                copies = cache.refresh(copies, step)   # re-read every refresh_steps
                ...  # the model's reads of these variables return ``copies``

    Other variables read in the scope are read once per use site's graph (a loop body
    reads them every iteration, as without the cache).
    """

    def __init__(self, variables: Sequence[tf.Variable], refresh_steps: int):
        self._variables = [caching_variable(v) for v in variables]
        self._refresh_steps = refresh_steps

    @contextlib.contextmanager
    def scope(self) -> Iterator[list[tf.Tensor]]:
        """Opens TensorFlow's caching scope and yields the weights read here, in order."""
        counter = distribute_utils.caching_scope_local
        with distribute_utils.cache_variable_reads():
            copies = []
            for variable in self._variables:
                # Start this trace's cache here, in the outer graph (a variable resets its
                # cache once per caching scope it has not seen yet).
                variable._current_new_cache_scope_count = counter.new_cache_scope_count - 1  # noqa: SLF001
                copies.append(variable.cached_read_value())
            yield copies

    def refresh(self, copies: list[tf.Tensor], step: tf.Tensor) -> list[tf.Tensor]:
        """The weights for step ``step`` (0-based within the call): ``copies``, or a
        fresh read when ``step`` is a positive multiple of ``refresh_steps`` (step 0 uses
        the read :meth:`scope` made). The model's reads of the variables return the result
        until the next call."""

        def read():
            return [tf.identity(v.get().read_value()) for v in self._variables]

        copies = tf.cond(
            (step > 0) & (step % self._refresh_steps == 0),
            read,
            lambda: [tf.identity(c) for c in copies],
        )
        for variable, copy in zip(self._variables, copies):
            variable._cache = copy  # noqa: SLF001  (what the variable's reads return)
        return copies


def watched(copies: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """The tensors through which the current graph uses ``copies`` (the outer graph's
    weight copies): watch these with a tape and take gradients with respect to them."""
    graph = tf.compat.v1.get_default_graph()
    return [graph.capture(c) if c.graph is not graph else c for c in copies]
