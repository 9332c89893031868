"""Serving an export in a fresh Python process that has only TensorFlow."""

from __future__ import annotations

import os

#: The first lines of a serving script: importing the framework or its other
#: dependencies fails in that process, as where only TensorFlow is installed.
ONLY_TENSORFLOW = r"""
import sys


class OnlyTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("recsys_dist", "tf_keras", "pyarrow", "fsspec", "yaml"):
            raise ImportError(f"{name} is not installed in a plain TensorFlow process")
        return None


sys.meta_path.insert(0, OnlyTensorFlow())
"""


def serving_env() -> dict[str, str]:
    """The environment of a plain TensorFlow process: no repo on the path, no tf-keras."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_USE_LEGACY_KERAS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env
