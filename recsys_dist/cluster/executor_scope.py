"""Keeping one worker's stuck call from holding every worker thread of the coordinator.

``ClusterCoordinator`` runs each worker's closures on a thread of its own, inside
``context.executor_scope(worker.executor)``. That scope keeps a Python wrapper of the
thread's previous executor (``Context.executor``) and drops it on exit, and the wrapper's
``__del__`` waits for every node pending on that executor. For a coordinator thread the
previous executor is the process's default one, which every thread shares: the copy of a
closure's outputs back to the coordinator runs there. When a worker's link is cut while
its outputs are being copied, that copy waits for the link, and every other worker
thread would wait for it too at the end of its next closure (in ``Executor.__del__``),
stopping training until the link returns.

:func:`borrowed_executors_do_not_wait` makes the wrappers ``Context.executor`` hands out
(of an executor the wrapper does not own) free themselves without waiting. Executors
made with ``executor.new_executor`` (owned, such as each worker's) are unchanged, and
``Executor.wait()`` and ``context.async_wait()`` still wait when called.
"""

from __future__ import annotations

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context as tf_context
from tensorflow.python.eager import executor as tf_executor


class BorrowedExecutor(tf_executor.Executor):
    """A wrapper of an executor it does not own: deleting it only frees the wrapper."""

    __slots__ = ()

    def __del__(self):
        try:
            pywrap_tfe.TFE_DeleteExecutor(self._handle)
        except TypeError:  # the module is being torn down at exit
            pass


def _borrowed(self) -> BorrowedExecutor:
    self.ensure_initialized()
    return BorrowedExecutor(pywrap_tfe.TFE_ContextGetExecutorForThread(self._context_handle))


def borrowed_executors_do_not_wait() -> None:
    """Installs the change (idempotent; call before a ``ClusterCoordinator`` runs)."""
    current = tf_context.Context.executor
    if current.fget is not _borrowed:
        tf_context.Context.executor = property(_borrowed, current.fset, None, current.__doc__)
