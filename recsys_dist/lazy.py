"""Modules imported when first used, so that naming them at a module's top costs nothing.

``from recsys_dist.lazy import tensorflow as tf`` gives a stand-in for TensorFlow whose
first attribute read (``tf.constant``) imports it. Modules of the config part hold
TensorFlow code (each feature kind's transform) through it and still import without
TensorFlow, so ``validate`` and ``--help`` do not pay its import. The pattern is
TensorFlow's own ``tensorflow/python/util/lazy_loader.py``.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A module imported on the first read of one of its attributes.

    Args:
      name: The module to import, e.g. ``"tensorflow"``.
    """

    def __getattr__(self, attribute: str) -> Any:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)  # later reads skip __getattr__
        return getattr(module, attribute)


tensorflow = LazyModule("tensorflow")
numpy = LazyModule("numpy")
