"""One worker of a two-process ``MultiWorkerMirroredStrategy`` that applies sparse
gradients through the project's optimizers, including steps where every worker's gradient
of a table has no rows (``test_multi_worker.py``). Worker ``w`` looks up ``IDS[step][w]``;
with SGD at rate 1 and the loss ``sum(lookup)``, each id's row falls by the number of times
the two workers looked it up, so worker 0 prints the table after the steps."""

import json
import os

import numpy as np

# isort: off
import recsys_dist  # noqa: F401  sets TensorFlow's environment defaults before its import
import tensorflow as tf

# isort: on
from recsys_dist.cluster.collective import collective_strategy
from recsys_dist.config.sections import OptimizerSpec
from recsys_dist.train.optimizers import make_optimizer

#: Per step, the ids of worker 0 and of worker 1: both empty, one empty, neither.
IDS = [([], []), ([3, 3], []), ([], [1]), ([5], [5, 2]), ([], [])]

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = collective_strategy()
with strategy.scope():
    table = tf.Variable(tf.zeros([8, 2]))
    optimizer = make_optimizer(OptimizerSpec(os.environ["SPARSE_SUM_OPTIMIZER"], 1.0), 1.0)


@tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
def step(ids):
    def replica_step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, ids))
        optimizer.apply_gradients([(tape.gradient(loss, table), table)])

    strategy.run(replica_step, args=(ids,))


for ids in IDS:
    step(tf.constant(ids[index], tf.int64))
if index == 0:
    print(json.dumps(np.asarray(table.numpy()).tolist()))
