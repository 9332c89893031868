"""Configs built as data: Python dicts, changed key by key, written as YAML.

A test that needs a variant of a config changes the dict (:func:`changed`) instead of
editing YAML text, and :func:`write_yaml` writes it the way a person would: small
mappings on one line, keys in their order, dates as plain text (``2026-01-01``, read as
text by the config loader, not quoted).
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import yaml

#: A value for :func:`changed` that removes the key.
DELETE = object()


class _ConfigDumper(yaml.SafeDumper):
    """YAML's safe dumper without anchors, and with dates as plain text: like
    ``recsys_dist.yaml_loader.TextDatesLoader``, it has no timestamp resolver, so
    ``2026-13-45`` is written unquoted as a config file would have it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_ConfigDumper.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeDumper.yaml_implicit_resolvers.items()
}


def dump_yaml(doc: dict) -> str:
    return yaml.dump(
        doc, Dumper=_ConfigDumper, sort_keys=False, default_flow_style=None, width=10**6
    )


def write_yaml(path: pathlib.Path, doc: dict) -> str:
    """Writes ``doc`` to ``path`` (creating its folder); returns the path as a string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(doc))
    return str(path)


def changed(doc: dict, changes: dict[str, Any] | None = None) -> dict:
    """A deep copy of ``doc`` with each dotted key of ``changes`` set to its value, or
    removed if the value is :data:`DELETE`. Every key's parent must exist, and a removed
    key must exist, so a misspelt key fails here instead of testing something else."""
    out = copy.deepcopy(doc)
    for key, value in (changes or {}).items():
        *parents, last = key.split(".")
        target = out
        for part in parents:
            target = target[part]
        if value is DELETE:
            del target[last]
        else:
            target[last] = copy.deepcopy(value)
    return out


def line_of(text: str, fragment: str) -> int:
    """The 1-based number of the one line of ``text`` that contains ``fragment``."""
    found = [n for n, line in enumerate(text.splitlines(), 1) if fragment in line]
    assert len(found) == 1, (fragment, found, text)
    return found[0]


# ---- the small feature config and its model config ----------------------------------

#: Four features on two tables; :func:`tests.support.data.small_table` writes its rows.
SMALL_FEATURES = {
    "tables": {"ads": {"rows": 1000, "dim": 4}, "tag": {"rows": 100, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "site": {"kind": "categorical", "dtype": "string", "table": "ads"},
        "price": {"kind": "numeric", "transform": "log1p"},
        "tags": {"kind": "multi_categorical", "table": "tag", "max_length": 3},
    },
    "labels": {"click": {}},
}


def small_config(directory: pathlib.Path, features: dict = SMALL_FEATURES, **data: Any) -> str:
    """Writes ``features.yaml`` and ``model.yaml`` (DCN-v2, batches of 32, rows in file
    order) into ``directory``; keyword arguments go in ``data:`` (``path`` defaults to
    ``directory/data``). Returns the model config's path."""
    write_yaml(directory / "features.yaml", features)
    return write_yaml(
        directory / "model.yaml",
        {
            "features": "features.yaml",
            "data": {"path": str(directory / "data"), **data},
            "model": {"name": "dcn_v2"},
            "input": {"batch_size": 32, "shuffle": False},
            "cluster": {"workers": 2, "ps": 1},
        },
    )
