"""Which process of ``pytest -n N --dist loadgroup`` runs which cluster test."""

from __future__ import annotations

import pathlib

import pytest


def group_modules(items: list, directory: pathlib.Path, shared_fixtures: tuple[str, ...]) -> None:
    """Marks every test of a module under ``directory`` with one ``xdist_group``, so the
    module runs whole in one process and its module fixtures are built once; the modules
    that use one of ``shared_fixtures`` (session fixtures) share one group."""
    items = [item for item in items if item.path.parent == directory]
    shared = {}  # a module -> the shared session fixture one of its tests uses
    for item in items:
        for name in shared_fixtures:
            if name in item.fixturenames:
                shared.setdefault(item.path, name)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(shared.get(item.path, item.path.stem)))
