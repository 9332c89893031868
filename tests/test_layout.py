"""The layout of the test suite itself (see tests/__init__.py), read from the source:

- ``tests/unit/<part>/`` is named after the part of ``recsys_dist`` it tests;
- the tests that start real TensorFlow server processes are in ``tests/cluster/``, every
  module there is marked ``cluster`` and no test elsewhere is, so ``-m "not cluster"``
  and the folder select the same tests;
- no module imports a test module (or a ``conftest``): what tests share is in
  ``tests/support/`` or a fixture of a ``conftest.py``.
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "recsys_dist"

#: Folders of tests/unit/ that are not named after one part of the package.
OTHER_UNIT_FOLDERS = {
    "foundations": "the lowest layer's single modules (storage_io, tf_log_filter, ...)",
    "pipelines": "the scripts of pipelines/",
}


def python_files() -> list[pathlib.Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def modules_of_tests() -> list[pathlib.Path]:
    return [p for p in python_files() if p.name.startswith("test_")]


def package_parts() -> set[str]:
    """``config``, ``models``, ... and the top-level modules ``cli``, ``errors``, ..."""
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return subpackages | modules


def is_cluster_mark(node: ast.AST) -> bool:
    """``pytest.mark.cluster`` (or ``mark.cluster``) in the source."""
    return (isinstance(node, ast.Attribute) and node.attr == "cluster"
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark")


def test_unit_test_folders_are_named_after_parts_of_the_package():
    folders = {p.name for p in (TESTS / "unit").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    unknown = folders - package_parts() - set(OTHER_UNIT_FOLDERS)
    assert not unknown, f"tests/unit/ folders that name no part of recsys_dist: {sorted(unknown)}"


def test_every_folder_of_test_modules_is_a_package():
    """Two test modules of one name in two folders would clash without ``__init__.py``."""
    missing = sorted({str(folder.relative_to(TESTS.parent))
                      for module in modules_of_tests()
                      for folder in [module.parent, *module.parent.parents]
                      if folder.is_relative_to(TESTS) and not (folder / "__init__.py").exists()})
    assert not missing, f"add __init__.py to {missing}"


def test_cluster_tests_are_the_tests_marked_cluster():
    unmarked, elsewhere = [], []
    for path in modules_of_tests():
        tree = ast.parse(path.read_text(), str(path))
        name = str(path.relative_to(TESTS.parent))
        if path.is_relative_to(TESTS / "cluster"):
            module_mark = any(
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
                and any(is_cluster_mark(n) for n in ast.walk(node.value))
                for node in tree.body)
            if not module_mark:
                unmarked.append(name)
        elif any(is_cluster_mark(node) for node in ast.walk(tree)):
            elsewhere.append(name)
    assert not unmarked, f"set pytestmark = pytest.mark.cluster in {unmarked}"
    assert not elsewhere, f"move the cluster tests of {elsewhere} to tests/cluster/"


def test_no_module_imports_a_test_module():
    offenders = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if any(part.startswith("test_") or part == "conftest"
                       for part in name.split(".")):
                    offenders.append(f"{path.relative_to(TESTS.parent)}: {name}")
    assert not offenders, ("move what these share to tests/support/ or a fixture:\n"
                           + "\n".join(offenders))
