"""Modules imported on first use (``recsys_dist/lazy.py``), checked in fresh interpreters so
that what was imported before is known."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_lazy_module_is_imported_on_its_first_attribute_read():
    assert (
        run(
            "import sys\n"
            "from recsys_dist.lazy import LazyModule\n"
            "colorsys = LazyModule('colorsys')\n"
            "before = 'colorsys' in sys.modules\n"
            "h, s, v = colorsys.rgb_to_hsv(1.0, 0.0, 0.0)\n"
            "print(before, 'colorsys' in sys.modules, (h, s, v),"
            " 'rgb_to_hsv' in vars(colorsys), colorsys.hsv_to_rgb is sys.modules['colorsys']"
            ".hsv_to_rgb)"
        )
        == "False True (0.0, 1.0, 1.0) True True"
    )


def test_naming_tensorflow_through_it_does_not_import_tensorflow():
    assert (
        run(
            "import sys\n"
            "from recsys_dist.lazy import tensorflow as tf, numpy as np\n"
            "print('tensorflow' in sys.modules, tf.__name__, np.__name__)"
        )
        == "False tensorflow numpy"
    )


def test_a_missing_module_or_attribute_fails_when_read():
    assert run(
        "from recsys_dist.lazy import LazyModule\n"
        "gone = LazyModule('no_such_module_here')\n"
        "try:\n"
        "    gone.anything\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
        "import json\n"
        "lazy_json = LazyModule('json')\n"
        "try:\n"
        "    lazy_json.no_such_function\n"
        "except AttributeError as exc:\n"
        "    print(exc)"
    ) == (
        "No module named 'no_such_module_here'\nmodule 'json' has no attribute 'no_such_function'"
    )
