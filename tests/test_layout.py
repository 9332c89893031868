"""The layout of the test suite itself (see tests/__init__.py), read from the source:

- ``tests/unit/<part>/`` is named after the part of ``recsys_dist`` it tests;
- the tests that start real TensorFlow server processes are in ``tests/cluster/``, every
  module there is marked ``cluster`` and no test elsewhere is, so ``-m "not cluster"``
  and the folder select the same tests;
- no module imports a test module (or a ``conftest``): what tests share is in
  ``tests/support/`` or a fixture of a ``conftest.py``;
- every module of ``recsys_dist`` has a test module named after it (``test_<name>.py``), or
  is listed in :data:`COVERED_BY` with the test module that covers it and names it, or
  holds no logic (:data:`NO_LOGIC`).
"""

from __future__ import annotations

import ast
import pathlib
import re

TESTS = pathlib.Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "recsys_dist"

#: Folders of tests/unit/ that are not named after one part of the package.
OTHER_UNIT_FOLDERS = {
    "foundations": "the lowest layer's single modules (storage_io, tf_log_filter, ...)",
    "pipelines": "the scripts of pipelines/",
    "benchmarks": "the dataset converters of benchmarks/datasets/",
}

#: Modules without a ``test_<name>.py`` of their own, and the test module that covers them.
#: That module names the module it covers (dotted name, path or file name), usually in its
#: docstring. A module whose behaviour needs running servers is covered by a module of
#: ``tests/cluster/``.
COVERED_BY: dict[str, str] = {
    "recsys_dist/checkpoint/object_graph.py": "tests/unit/checkpoint/test_warm_start.py",
    "recsys_dist/checkpoint/restore.py": "tests/unit/checkpoint/test_store.py",
    "recsys_dist/checkpoint/signature.py": "tests/unit/checkpoint/test_store.py",
    "recsys_dist/cluster/in_process.py": "tests/cluster/test_train.py",
    "recsys_dist/cluster/server.py": "tests/unit/cluster/test_local.py",
    "recsys_dist/cluster/signals.py": "tests/unit/cluster/test_local.py",
    "recsys_dist/collective_worker.py": "tests/cluster/test_multi_worker.py",
    "recsys_dist/commands.py": "tests/unit/cli/test_cli.py",
    "recsys_dist/config/experiment.py": "tests/unit/config/test_config.py",
    "recsys_dist/config/sections.py": "tests/unit/config/test_config.py",
    "recsys_dist/features/kinds/base.py": "tests/unit/features/test_feature_kinds.py",
    "recsys_dist/features/kinds/context.py": "tests/unit/features/test_feature_kinds.py",
    "recsys_dist/features/kinds/categorical.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/cross.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/multi_categorical.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/numeric.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/padding.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/vocabulary.py": "tests/unit/features/test_transforms.py",
    "recsys_dist/features/kinds/sequence.py": "tests/unit/features/test_sequences.py",
    "recsys_dist/data/input_fn.py": "tests/unit/data/test_input.py",
    "recsys_dist/data/synth_columns.py": "tests/unit/data/test_synth.py",
    "recsys_dist/data/synth_effects.py": "tests/unit/data/test_synth.py",
    "recsys_dist/data/synth_files.py": "tests/unit/data/test_synth.py",
    "recsys_dist/data/synth_schema.py": "tests/unit/data/test_synth.py",
    "recsys_dist/evaluation/job.py": "tests/cluster/test_evaluate.py",
    "recsys_dist/evaluation/predict.py": "tests/cluster/test_evaluate.py",
    "recsys_dist/evaluation/report.py": "tests/unit/evaluation/test_metrics.py",
    **{
        f"recsys_dist/evaluation/metrics/{name}.py": "tests/unit/evaluation/test_metrics.py"
        for name in (
            "bootstrap",
            "checks",
            "collect",
            "compare",
            "loss",
            "numerics",
            "ranking",
            "slices",
            "split",
        )
    },
    "recsys_dist/export/saved_model.py": "tests/cluster/test_export.py",
    "recsys_dist/models/table_stack.py": "tests/unit/models/test_embedding.py",
    "recsys_dist/models/activations.py": "tests/unit/models/test_attention.py",
    "recsys_dist/models/masking.py": "tests/unit/models/test_attention.py",
    "recsys_dist/models/dynamic_lookup.py": "tests/unit/models/test_dynamic_table.py",
    "recsys_dist/models/rows_in_use.py": "tests/unit/models/test_dynamic_table.py",
    "recsys_dist/models/sharding.py": "tests/unit/cluster/test_placement.py",
    "recsys_dist/models/zoo/bst.py": "tests/unit/models/test_sequence_models.py",
    "recsys_dist/models/zoo/din.py": "tests/unit/models/test_sequence_models.py",
    "recsys_dist/models/zoo/dien.py": "tests/unit/models/test_sequence_models.py",
    **{
        f"recsys_dist/models/zoo/{name}.py": "tests/unit/models/test_zoo.py"
        for name in ("dcn_v2", "deepfm", "dlrm", "lr", "mmoe", "ranking_model", "wide_deep")
    },
    "recsys_dist/ops/build.py": "tests/unit/ops/test_parquet_op.py",
    "recsys_dist/retrain/daily.py": "tests/cluster/test_retrain.py",
    "recsys_dist/train/async_runner.py": "tests/cluster/test_train.py",
    "recsys_dist/train/result.py": "tests/cluster/test_train.py",
    "recsys_dist/train/run.py": "tests/cluster/test_train.py",
    "recsys_dist/train/trainer.py": "tests/cluster/test_train.py",
    "recsys_dist/train/attempt.py": "tests/unit/train/test_loop_parts.py",
    "recsys_dist/train/cadence.py": "tests/unit/train/test_loop_parts.py",
    "recsys_dist/train/hooks.py": "tests/unit/train/test_loop_parts.py",
    "recsys_dist/train/reporting.py": "tests/unit/train/test_loop_parts.py",
    "recsys_dist/train/table_bookkeeping.py": "tests/unit/train/test_loop_parts.py",
    "recsys_dist/train/lockstep_runner.py": "tests/unit/train/test_lockstep_rows.py",
    "recsys_dist/train/step.py": "tests/unit/train/test_replicas.py",
    "recsys_dist/train/validation.py": "tests/cluster/test_early_stopping.py",
}

#: Modules with no logic to test (constants or re-exports only, under about 15 lines of
#: code), each with the reason. None today: every module has a test.
NO_LOGIC: dict[str, str] = {}


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
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "cluster"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def test_unit_test_folders_are_named_after_parts_of_the_package():
    folders = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    unknown = folders - package_parts() - set(OTHER_UNIT_FOLDERS)
    assert not unknown, f"tests/unit/ folders that name no part of recsys_dist: {sorted(unknown)}"


def test_every_folder_of_test_modules_is_a_package():
    """Two test modules of one name in two folders would clash without ``__init__.py``."""
    missing = sorted(
        {
            str(folder.relative_to(TESTS.parent))
            for module in modules_of_tests()
            for folder in [module.parent, *module.parent.parents]
            if folder.is_relative_to(TESTS) and not (folder / "__init__.py").exists()
        }
    )
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
                for node in tree.body
            )
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
                if any(part.startswith("test_") or part == "conftest" for part in name.split(".")):
                    offenders.append(f"{path.relative_to(TESTS.parent)}: {name}")
    assert not offenders, "move what these share to tests/support/ or a fixture:\n" + "\n".join(
        offenders
    )


def _names_of(module: pathlib.Path) -> tuple[str, ...]:
    """How a test module may name ``module``: ``recsys_dist.a.b``, ``a/b.py`` or ``b.py``."""
    relative = module.relative_to(PACKAGE)
    dotted = ".".join(("recsys_dist", *relative.with_suffix("").parts))
    return dotted, relative.as_posix(), module.name


def _names(text: str, module: pathlib.Path) -> bool:
    """Whether ``text`` names ``module`` as a whole word (``run.py`` is not in
    ``train_run.py``, ``recsys_dist.train.step`` not in ``recsys_dist.train.steps``)."""
    return any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) for name in _names_of(module))


def test_every_module_has_its_tests():
    own = {p.name.removeprefix("test_") for p in modules_of_tests()}
    missing, wrong = [], []
    for module in sorted(PACKAGE.rglob("*.py")):
        if module.name == "__init__.py" or "__pycache__" in module.parts:
            continue
        name = str(module.relative_to(TESTS.parent))
        if module.name in own or name in NO_LOGIC:
            continue
        test = COVERED_BY.get(name)
        if test is None:
            missing.append(name)
            continue
        path = TESTS.parent / test
        if not path.is_file():
            wrong.append(f"{name}: {test} does not exist")
        elif not _names(path.read_text(), module):
            wrong.append(
                f"{name}: {test} does not name it (say what it covers in its "
                "docstring, e.g. covers ``" + _names_of(module)[1] + "``)"
            )
    listed = [n for n in [*COVERED_BY, *NO_LOGIC] if not (TESTS.parent / n).is_file()]
    assert not listed, f"COVERED_BY / NO_LOGIC list modules that do not exist: {listed}"
    named = [n for n in [*COVERED_BY, *NO_LOGIC] if pathlib.Path(n).name in own]
    assert not named, f"these have a test module of their own name now; unlist them: {named}"
    assert not wrong, "\n".join(wrong)
    assert not missing, (
        "these modules have no test module named after them: add tests/unit/<part>/"
        "test_<name>.py (or tests/cluster/ for a test that needs server processes), or, when "
        "a test module of the part that owns it really covers it, name the module in that "
        "test module's docstring and add it to COVERED_BY in tests/test_layout.py:\n"
        + "\n".join(missing)
    )
