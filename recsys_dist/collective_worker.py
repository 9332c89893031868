"""A worker process of a local ``multi_worker_mirrored`` run (``cluster/collective.py``).

``python -m recsys_dist.collective_worker``, started (or forked) by the run's launcher with
``TF_CONFIG`` and the run file (:data:`~recsys_dist.cluster.collective.RUN_FILE_ENV`) in
its environment: it trains the run with the command line's handling of signals and errors,
and worker 0 writes the run's outcome for the launcher.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf

from recsys_dist.checkpoint.store import find_checkpoint
from recsys_dist.cluster.child_fork import name_process
from recsys_dist.cluster.collective import (
    INTRA_OP_THREADS_ENV,
    OUTCOME_FILE,
    RUN_FILE_ENV,
    CollectiveRun,
    collective_task,
    worker_name,
)
from recsys_dist.config import load_config
from recsys_dist.console import configure_output, reporting_errors, run_command
from recsys_dist.train.run import train_run


def main() -> None:
    """Trains the run the launcher wrote, as a command: signals and errors as ``recsys-dist``
    handles them."""
    configure_output()
    run_command(lambda: reporting_errors(_run_worker))


def _run_worker() -> int:
    name_process(worker_name(collective_task()[1]))

    # Before TensorFlow starts: the workers share this machine's cores (as a local
    # parameter-server cluster's servers do; docs/cluster.md#threads-of-a-local-cluster).
    tf.config.threading.set_intra_op_parallelism_threads(int(os.environ[INTRA_OP_THREADS_ENV]))
    with open(os.environ[RUN_FILE_ENV], encoding="utf-8") as handle:
        run = CollectiveRun(**json.load(handle))
    config = load_config(run.config_file).with_data_path(run.data_path)
    warm = find_checkpoint("", run.warm_start_from) if run.warm_start_from else None
    outcome = train_run(
        config,
        run.model_dir,
        evaluate=run.evaluate,
        warm_start_from=warm,
        on_table_resize=run.on_table_resize,
    )
    if collective_task()[1] == 0:
        path = os.path.join(os.path.dirname(os.environ[RUN_FILE_ENV]), OUTCOME_FILE)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(dataclasses.asdict(outcome), handle)
    return 0


if __name__ == "__main__":
    main()
