"""recsys_dist: sparse CTR / ranking models trained on TensorFlow parameter servers."""

import os as _os
import time as _time

#: Unix time at which this process first imported recsys_dist: for a ``recsys-dist``
#: command, its start (``train_result.json`` counts the start-up from here).
COMMAND_STARTED_AT = _time.time()

# tf.keras must be tf-keras (Keras 2): Keras 3 cannot train with ParameterServerStrategy.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Hide the CUDA-plugin registration noise of CPU-only TensorFlow; errors still raise.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from recsys_dist import tf_log_filter as _tf_log_filter  # noqa: E402

# ... including the lines TensorFlow's libraries log while they load (see the module).
_tf_log_filter.install()

__version__ = "0.1.0"
