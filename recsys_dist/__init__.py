"""recsys_dist: sparse CTR / ranking models trained on TensorFlow parameter servers."""

import os as _os

# tf.keras must be tf-keras (Keras 2): Keras 3 cannot train with ParameterServerStrategy.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Hide the CUDA-plugin registration noise of CPU-only TensorFlow; errors still raise.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"
