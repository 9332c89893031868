"""Force-load the tensorflow-io kernels and filesystems in this process.

tensorflow-io registers its ops lazily, on first attribute access of ``core_ops``. A
TensorFlow server process (worker or parameter server) never touches them itself, so
a dataset graph sent by the coordinator fails with
``Op type not registered 'IO>ParquetReadableInfo'`` unless the server loaded them
before it started serving. Importing ``tensorflow_io`` also registers the ``s3://``
and ``hdfs://`` filesystems with ``tf.io.gfile``.
"""

from __future__ import annotations

_loaded = False


def load_tfio_kernels() -> None:
    """Loads the tensorflow-io op library and filesystem plugins once per process."""
    global _loaded
    if _loaded:
        return
    import tensorflow_io  # noqa: F401  registers s3:// and hdfs:// filesystems
    from tensorflow_io.python.ops import core_ops

    # Touching one op resolves the lazy loader and registers every IO> kernel.
    _ = core_ops.io_parquet_readable_read
    _loaded = True
