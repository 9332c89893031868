"""The Airflow DAG file without Airflow: stand-in ``airflow`` modules record what it builds.

Checks the DAG's settings (daily, catchup, one run at a time), the two tasks and their
order, the retry and gate handling of ``retrain``, and that the rendered commands are
accepted by the real command lines they call.
"""

from __future__ import annotations

import datetime
import importlib.util
import pathlib
import shlex
import subprocess
import sys
import types

import pytest

from tests.support.paths import BIN, REPO

DAG_FILE = REPO / "pipelines" / "airflow_dag.py"
DS = "2026-01-14"


class FakeDAG:
    """Records its arguments and the operators created inside its ``with`` block."""

    current: "FakeDAG | None" = None

    def __init__(self, dag_id: str, **kwargs):
        self.dag_id = dag_id
        self.kwargs = kwargs
        self.params = kwargs.get("params") or {}
        self.tasks: list[FakeBashOperator] = []

    def __enter__(self) -> "FakeDAG":
        FakeDAG.current = self
        return self

    def __exit__(self, *exc) -> None:
        FakeDAG.current = None


class FakeBashOperator:
    """Records its keyword arguments and its ``>>`` edges."""

    def __init__(self, *, task_id: str, bash_command: str, **kwargs):
        self.task_id = task_id
        self.bash_command = bash_command
        self.kwargs = kwargs
        self.downstream: list[FakeBashOperator] = []
        self.upstream: list[FakeBashOperator] = []
        dag = kwargs.get("dag") or FakeDAG.current
        assert dag is not None, f"task {task_id} created outside a DAG"
        dag.tasks.append(self)

    def __rshift__(self, other: "FakeBashOperator") -> "FakeBashOperator":
        self.downstream.append(other)
        other.upstream.append(self)
        return other


@pytest.fixture
def dag_module(monkeypatch):
    """The DAG file imported against stand-in ``airflow`` modules, with HOME = this repo."""
    airflow = types.ModuleType("airflow")
    airflow.DAG = FakeDAG
    operators = types.ModuleType("airflow.operators")
    bash = types.ModuleType("airflow.operators.bash")
    bash.BashOperator = FakeBashOperator
    airflow.operators = operators
    operators.bash = bash
    for name, module in (
        ("airflow", airflow),
        ("airflow.operators", operators),
        ("airflow.operators.bash", bash),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("RECSYS_DIST_HOME", str(REPO))
    spec = importlib.util.spec_from_file_location("recsys_dist_airflow_dag", DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(command: str, params: dict, ds: str = DS) -> str:
    """Renders a bash_command the way Airflow does (Jinja with ``ds``, ``params``, macros)."""
    jinja2 = pytest.importorskip("jinja2")

    def ds_add(value: str, days: int) -> str:
        return (datetime.date.fromisoformat(value) + datetime.timedelta(days=days)).isoformat()

    return jinja2.Template(command).render(
        ds=ds, params=params, macros=types.SimpleNamespace(ds_add=ds_add)
    )


def argv(rendered: str) -> list[str]:
    """The program and arguments after the ``cd HOME &&`` prefix."""
    prefix, sep, command = rendered.partition(" && ")
    assert sep and prefix == f"cd {REPO}", rendered
    return shlex.split(command)


def test_the_dag_is_daily_in_order_with_catchup_and_one_run_at_a_time(dag_module):
    dag = dag_module.dag
    assert dag.dag_id == "recsys_dist_daily"
    assert dag.kwargs["schedule"] in ("@daily", datetime.timedelta(days=1))
    assert dag.kwargs["catchup"] is True
    assert dag.kwargs["max_active_runs"] == 1
    assert dag.kwargs["start_date"].tzinfo is not None
    assert [t.task_id for t in dag.tasks] == ["retrain", "offline_eval"]
    retrain, offline_eval = dag.tasks
    assert retrain.downstream == [offline_eval] and offline_eval.upstream == [retrain]
    assert offline_eval.downstream == []


def test_retrain_is_retried_waits_for_the_previous_day_and_skips_a_gated_day(dag_module):
    retrain, offline_eval = dag_module.dag.tasks
    assert retrain.bash_command == dag_module.RETRAIN_COMMAND
    assert "recsys-dist retrain --config" in retrain.bash_command
    assert "--date {{ ds }}" in retrain.bash_command
    assert retrain.kwargs["retries"] > 0
    assert retrain.kwargs["retry_delay"] > datetime.timedelta(0)
    assert retrain.kwargs["depends_on_past"] is True
    assert retrain.kwargs["skip_on_exit_code"] == 5  # gate rejected: skipped, not failed
    assert offline_eval.bash_command == dag_module.OFFLINE_EVAL_COMMAND
    assert "python pipelines/offline_eval.py --root {{ params.root }}" in offline_eval.bash_command
    assert "--dates {{ macros.ds_add(ds, -6) }}..{{ ds }}" in offline_eval.bash_command
    assert offline_eval.kwargs["trigger_rule"] == "none_failed"  # also after a gated day


def test_rendered_commands_are_accepted_by_the_real_command_lines(dag_module):
    from recsys_dist.cli import build_parser

    params = dag_module.dag.params
    retrain = argv(render(dag_module.RETRAIN_COMMAND, params))
    assert retrain[0] == ".venv/bin/recsys-dist" and retrain[1:3] == ["retrain", "--config"]
    assert retrain[3] == params["config"] and retrain[4:] == ["--date", DS]
    offline = argv(render(dag_module.OFFLINE_EVAL_COMMAND, params))
    assert offline[:2] == [".venv/bin/python", "pipelines/offline_eval.py"]
    options = dict(zip(offline[2::2], offline[3::2]))
    assert options == {
        "--root": params["root"],
        "--dates": "2026-01-08..2026-01-14",
        "--last": "7",
        "--out": f"{params['reports']}/{DS}",
    }

    # The offline evaluation's own parser takes the rendered arguments.
    spec = importlib.util.spec_from_file_location(
        "offline_eval_script", REPO / "pipelines" / "offline_eval.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    parsed = script.build_parser().parse_args(offline[2:])
    assert (parsed.root, parsed.dates, parsed.last) == (params["root"], "2026-01-08..2026-01-14", 7)

    # Both commands, as rendered (with this interpreter's bin/), exit 0 with --help.
    def run_with_help(words: list[str]) -> subprocess.CompletedProcess:
        words = [str(BIN / pathlib.Path(words[0]).name), *words[1:], "--help"]
        return subprocess.run(words, cwd=REPO, capture_output=True, text=True, timeout=300)

    result = run_with_help(offline)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--root" in result.stdout and "--dates" in result.stdout

    commands = subprocess.run(
        [str(BIN / "recsys-dist"), "--help"], capture_output=True, text=True, timeout=300
    )
    assert commands.returncode == 0, commands.stderr[-2000:]
    if "retrain" not in commands.stdout:
        pytest.skip("recsys-dist has no retrain subcommand yet")
    result = run_with_help(retrain)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--date" in result.stdout
    parsed = build_parser().parse_args(retrain[1:])
    assert parsed.command == "retrain" and str(parsed.date) == DS
