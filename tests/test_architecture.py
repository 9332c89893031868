"""The package's import graph: dependencies point one way, and no module imports itself
back through others. Read from the source (every import, also those inside functions),
so a lazy import cannot hide an arrow against the order. docs/architecture.md explains
the layers. Also read from the source: only the feature kinds ask which kind a feature
is."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

from recsys_dist.features.kinds import FEATURE_KINDS

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "recsys_dist"

#: Lowest first. A part may import its own layer's parts (foundations only) and the
#: layers below it, never one above.
LAYERS: list[set[str]] = [
    {
        "errors",
        "progress",
        "tf_log_filter",
        "filesystems",
        "storage_io",
        "ops",
        "lazy",
        "hashing",
        "scratch",
        "yaml_loader",
        "yaml_schema",
    },
    {"features"},
    {"config"},
    {"models"},
    {"data"},
    {"cluster"},
    {"checkpoint"},
    {"evaluation"},
    {"train"},
    {"export"},
    {"retrain"},
    {"console", "cli", "commands", "restart", "collective_worker"},  # entry points
]
LAYER_OF = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def module_name(path: pathlib.Path) -> str:
    parts = ("recsys_dist", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: pathlib.Path, known: set[str]) -> set[str]:
    """The ``recsys_dist`` modules ``path`` imports, wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from recsys_dist import storage_io`` imports the module storage_io
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if n in known else node.module for n in names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "recsys_dist")
    return found


def part_of(module: str) -> str:
    """``recsys_dist.train.trainer`` -> ``train``; ``recsys_dist.cli`` -> ``cli``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def edges() -> dict[str, set[str]]:
    known = modules()
    return {name: imported_modules(path, set(known)) - {name} for name, path in known.items()}


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(m) for m in modules()} - {"__init__"}
    assert parts <= set(LAYER_OF), f"add {sorted(parts - set(LAYER_OF))} to LAYERS"


def test_no_import_points_up_the_layers():
    against = []
    for module, targets in edges().items():
        source = part_of(module)
        if source == "__init__":
            continue
        for target in targets:
            goal = part_of(target)
            if goal != "__init__" and LAYER_OF[goal] > LAYER_OF[source]:
                against.append(f"{module} -> {target}")
    assert not against, "imports against the layer order:\n" + "\n".join(sorted(against))


def test_the_module_graph_has_no_cycle():
    graph = edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt in graph and nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_module_imports_a_private_name_of_another_part():
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("recsys_dist")
                and part_of(node.module) != part_of(name)
            ):
                offenders += [
                    f"{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                ]
    assert not offenders, "\n".join(offenders)


#: The most statements a function may hold, its nested functions' included: more read as
#: several jobs. Statements, not lines, so the formatter's line breaks do not count.
MAX_FUNCTION_STATEMENTS = 40


def statements(function: ast.AST) -> int:
    return sum(isinstance(node, ast.stmt) for node in ast.walk(function)) - 1


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = statements(node)
                if count > MAX_FUNCTION_STATEMENTS:
                    long.append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} "
                        f"{node.name}: {count} statements"
                    )
    assert not long, (
        f"functions of more than {MAX_FUNCTION_STATEMENTS} statements; split "
        "them:\n" + "\n".join(long)
    )


def test_the_function_limit_counts_statements_not_lines():
    source = (
        'def f(x):\n    """Doc."""\n    if x:\n        return (1,\n'
        "                2)\n    return 0\n"
    )
    assert statements(ast.parse(source).body[0]) == 4  # the docstring, if, two returns


#: Where a feature's kind may be told apart: the kinds' own package.
KINDS = PACKAGE / "features" / "kinds"


def kind_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """``isinstance`` with a kind's class, and comparisons of a ``.kind`` (but a numpy
    dtype's or a class's own ``self.kind``), with their lines."""
    classes = {cls.__name__ for cls in FEATURE_KINDS.values()}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            named = {
                n.id if isinstance(n, ast.Name) else n.attr
                for arg in node.args[1:]
                for n in ast.walk(arg)
                if isinstance(n, (ast.Name, ast.Attribute))
            }
            if named & classes:
                found.append(
                    (node.lineno, "isinstance(..., " + ", ".join(sorted(named & classes)) + ")")
                )
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if (
                    isinstance(side, ast.Attribute)
                    and side.attr == "kind"
                    and not (isinstance(side.value, ast.Name) and side.value.id == "self")
                    and not (isinstance(side.value, ast.Attribute) and side.value.attr == "dtype")
                ):
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_feature_kinds_ask_which_kind_a_feature_is():
    """Elsewhere a feature is asked (``feature.table_name``, ``Kind.transform_all``), so a
    new kind is one module of ``features/kinds/`` and no kind takes another's path."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(KINDS)
        for line, text in kind_tests(ast.parse(path.read_text(), str(path)))
    ]
    assert not offenders, (
        "ask the feature's kind instead (recsys_dist/features/kinds/):\n" + "\n".join(offenders)
    )


def test_the_kind_test_finds_what_it_looks_for():
    source = (
        "if isinstance(f, (CategoricalFeature, int)): pass\n"
        "if feature.kind == 'sequence': pass\n"
        "if 'cross' != features[n].kind: pass\n"
        "if values.dtype.kind == 'u' or self.kind == 'dynamic': pass\n"
        "if isinstance(f, kinds.NumericFeature) or isinstance(f, dict): pass\n"
    )
    assert [line for line, _ in kind_tests(ast.parse(source))] == [1, 2, 3, 5]


#: What only the cluster layer may ask: which strategy runs, where the servers are.
DISTRIBUTION_QUESTIONS = (
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "list_logical_devices",
    "/job:ps",
    ".cluster.",
)


def test_the_models_know_nothing_of_distribution():
    """Where variables live is decided in ``cluster/placement.py`` and reaches the models
    as a ``Placement`` (``models/sharding.py``); a model module asks no strategy, names
    no server and reads no ``config.cluster``."""
    offenders = []
    for path in sorted((PACKAGE / "models").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # docstrings may say how a strategy treats the variables
            text = (
                ast.unparse(node)
                if isinstance(node, (ast.Call, ast.Attribute, ast.Constant))
                else ""
            )
            found = [q for q in DISTRIBUTION_QUESTIONS if q in text]
            if found:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {found}")
    imports = [
        f"{module} -> {target}"
        for module, targets in edges().items()
        if part_of(module) == "models"
        for target in targets
        if part_of(target) == "cluster"
    ]
    assert not offenders and not imports, "\n".join(sorted(set(offenders)) + imports)


#: The modules that may import inside functions, and why. Everywhere else imports sit at
#: the top of the module, where a reader looks for them.
IMPORTS_INSIDE_FUNCTIONS = {
    "recsys_dist/cli.py": "validate and --help start without TensorFlow",
    "recsys_dist/commands.py": "a command imports what it runs: validate without TensorFlow",
    "recsys_dist/cluster/local.py": "the console runner imports it; TensorFlow only to connect",
    "recsys_dist/cluster/server.py": "cluster/local.py imports its constants without TensorFlow",
    "recsys_dist/cluster/server_forks.py": "cluster/local.py imports it without TensorFlow; "
    "only its forking process imports TensorFlow",
    "recsys_dist/models/footprint.py": "the planner (cluster/capacity.py) reads its records "
    "without TensorFlow; building the model needs it",
    "recsys_dist/ops/__init__.py": "the build step runs only when the library is missing",
    "recsys_dist/ops/build.py": "TensorFlow and pyarrow are asked for their paths only to build",
    "recsys_dist/storage_io.py": "botocore is loaded only with s3:// paths",
}
#: Of those, the modules that must import without TensorFlow.
WITHOUT_TENSORFLOW = (
    "recsys_dist.cli",
    "recsys_dist.commands",
    "recsys_dist.console",
    "recsys_dist.restart",
    "recsys_dist.cluster.local",
    "recsys_dist.cluster.server",
    "recsys_dist.cluster.server_forks",
    "recsys_dist.storage_io",
    "recsys_dist.models.footprint",
    "recsys_dist.cluster.capacity",
)


def test_imports_sit_at_the_top_of_modules_but_where_a_reason_is_named():
    inside = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node)
            ):
                inside.add(str(path.relative_to(PACKAGE.parent)))
    unexplained = sorted(inside - set(IMPORTS_INSIDE_FUNCTIONS))
    assert not unexplained, (
        "move these modules' imports to the top, or name the reason in "
        f"IMPORTS_INSIDE_FUNCTIONS: {unexplained}"
    )
    stale = sorted(set(IMPORTS_INSIDE_FUNCTIONS) - inside)
    assert not stale, f"no import inside a function any more: {stale}"


def test_the_modules_that_defer_tensorflow_import_without_it():
    program = (
        "import importlib, sys\n"
        f"for name in {WITHOUT_TENSORFLOW!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'tensorflow' not in sys.modules, name\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


#: The longest a module may be, as the formatter writes it. A longer one holds several
#: jobs: split it by job. (``data/synth.py`` is the longest: its docstring writes out the
#: generator's model.)
MAX_MODULE_LINES = 510


def test_no_module_is_longer_than_the_limit():
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules longer than {MAX_MODULE_LINES} lines; split them by job: {long}"


#: Hidden channels a model module must not read its placement through.
CONTEXT_NAMES = {"threading", "contextvars", "local", "ContextVar"}
#: The context functions that once carried placement and shard counts to the models.
REMOVED_CONTEXT_FUNCTIONS = {
    "current_placement",
    "placed",
    "dynamic_table_shards",
    "dynamic_shards",
    "shared_across_layers",
    "stock_row_ops",
    "stock_rows_in_force",
    "embedding_tables",
    "building_under",
}


def context_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each import of ``threading`` or ``contextvars``, each use of
    ``threading.local`` or ``ContextVar``, and each import or call of a removed context
    function, in line order."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in CONTEXT_NAMES]
        elif isinstance(node, ast.ImportFrom):
            names = {node.module or "", *(a.name for a in node.names)}
            wanted = CONTEXT_NAMES | REMOVED_CONTEXT_FUNCTIONS
            found += [(node.lineno, n) for n in sorted(names & wanted)]
        elif isinstance(node, ast.Attribute) and node.attr in {"local", "ContextVar"}:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in REMOVED_CONTEXT_FUNCTIONS:
                found.append((node.lineno, name))
    return sorted(found)


def test_no_model_module_reads_its_placement_from_context():
    """A model takes its placement and dynamic shard count as arguments of its
    construction (``models/sharding.py``): no module under ``models/`` keeps thread-local
    or context-variable state or reads the context functions that once carried them. The
    one implicit channel, TensorFlow's variable partitioner, lives in
    ``cluster/placement.py``."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted((PACKAGE / "models").rglob("*.py"))
        for line, name in context_reads(ast.parse(path.read_text(), str(path)))
    ]
    assert not offenders, "\n".join(offenders)


def test_the_context_test_finds_what_it_looks_for():
    source = (
        "import threading\n"
        "from contextvars import ContextVar\n"
        "_scope = threading.local()\n"
        "from recsys_dist.models.sharding import current_placement\n"
        "with shared_across_layers(): pass\n"
        "sharding.dynamic_shards()\n"
        "x = placement.dynamic_shards\n"
    )
    assert [line for line, _ in context_reads(ast.parse(source))] == [1, 2, 2, 3, 4, 5, 6]


# Private attributes a model module may touch on an object other than ``self``: another
# shard of the same class, and the two serialization hooks TensorFlow gives a variable.
PRIVATE_READS_ALLOWED = {
    ("dynamic_table.py", "_counting"),
    ("dynamic_table.py", "_row_initializer"),
    ("rows_in_use.py", "_serialize_to_tensors"),
    ("rows_in_use.py", "_restore_from_tensors"),
}


def private_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, attribute)`` of each ``x._name`` whose ``x`` is not ``self`` or ``cls``."""
    return sorted(
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    )


def test_no_model_layer_touches_another_layers_private_attributes():
    """A model hands its layers what they need as arguments (the embedding collection's
    lookups reach ``compute_logits`` as a value): no module under ``models/`` reads or
    writes another object's private attributes beyond the few named above."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {attribute}"
        for path in sorted((PACKAGE / "models").rglob("*.py"))
        for line, attribute in private_reads(ast.parse(path.read_text(), str(path)))
        if (path.name, attribute) not in PRIVATE_READS_ALLOWED
    ]
    assert not offenders, "\n".join(offenders)


def test_the_private_read_test_finds_what_it_looks_for():
    source = "layer._resolved = (plan, vectors)\nself._mine = 1\nx = other._state.on\ny.__class__\n"
    assert private_reads(ast.parse(source)) == [(1, "_resolved"), (3, "_state")]
