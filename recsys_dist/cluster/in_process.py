"""An in-process training cluster: every worker and parameter server is a
``tf.distribute.Server`` inside the coordinator's own process.

The servers still talk gRPC on 127.0.0.1 and the job still runs through
``ParameterServerStrategy`` and ``ClusterCoordinator``, so the model, its sharding and
the input functions are exactly those of a subprocess cluster. What goes is the cost of
starting one Python and TensorFlow per task (seconds each on 2 cores), which dominates
small jobs. What goes with it is fault isolation: a server cannot be killed, restarted
or stopped on its own, and it lives until the process exits. A job that must survive a
lost worker or parameter server uses ``cluster.mode: local`` (one process per task).

The servers of one process share its thread pools; each server gets
``workers + 2`` inter-op threads, since fewer can make the first step hang.

Example:
  >>> cluster = InProcessCluster(workers=2, ps=2)
  >>> strategy = tf.distribute.ParameterServerStrategy(cluster.cluster_resolver())
"""

from __future__ import annotations

import os

import tensorflow as tf

from recsys_dist import ops
from recsys_dist.cluster.local import free_ports
from recsys_dist.cluster.server import SERVER_JOBS, default_inter_op_threads

_HOST = "127.0.0.1"


class InProcessCluster:
    """Worker and parameter-server gRPC servers in this process, on 127.0.0.1.

    Args:
      workers: Number of worker servers, >= 1.
      ps: Number of parameter servers, >= 1.
      inter_op_threads: Inter-op threads of each server; defaults to ``workers + 2``.

    Raises:
      ValueError: A count is below 1.
    """

    def __init__(self, workers: int, ps: int, inter_op_threads: int | None = None):
        for name, count in (("workers", workers), ("ps", ps)):
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {count!r}")

        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        ops.load()  # the Parquet op runs in the workers' dataset graphs, here
        ports = iter(free_ports(workers + ps))
        self.cluster_spec = {
            job: [f"{_HOST}:{next(ports)}" for _ in range(count)]
            for job, count in zip(SERVER_JOBS, (workers, ps))
        }
        threads = inter_op_threads or default_inter_op_threads(self.cluster_spec)
        # References are kept: a server whose Python object is collected stops serving.
        self._servers = [
            tf.distribute.Server(
                tf.train.ClusterSpec(self.cluster_spec),
                job_name=job,
                task_index=index,
                protocol="grpc",
                start=True,
                config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads),
            )
            for job in SERVER_JOBS
            for index in range(len(self.cluster_spec[job]))
        ]

    def cluster_resolver(self) -> tf.distribute.cluster_resolver.SimpleClusterResolver:
        """Returns a gRPC cluster resolver for ``ParameterServerStrategy``."""
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.cluster_spec), rpc_layer="grpc"
        )
