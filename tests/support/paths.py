"""Where the repository and the installed commands are."""

from __future__ import annotations

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
#: The environment's bin/ (recsys-dist, moto_server, saved_model_cli).
BIN = pathlib.Path(sys.executable).parent
CLI = str(BIN / "recsys-dist")
DEMO_CONFIG = str(REPO / "configs" / "demo.yaml")
