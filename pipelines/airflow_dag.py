"""Airflow DAG ``recsys_dist_daily``: retrain on each day, then compare the published models.

Copy (or symlink) this file into Airflow's ``dags/`` folder. Two tasks per day ``ds``:

- ``retrain``: ``recsys-dist retrain --config CONFIG --date ds``. Trains ``ROOT/runs/ds``
  warm-started from the newest model published before ``ds``, gates it against that
  model on the held-out partition and publishes ``ROOT/published/ds`` if it passes.
  Exit code 5 (the gate rejected the model) marks the task *skipped*, not failed, and
  it is not retried; any other non-zero code fails it, and a retry resumes from the
  run's last checkpoint. What each code means: docs/retrain.md, "Exit codes".
- ``offline_eval``: ``python pipelines/offline_eval.py`` scores the newest published
  models on the last 7 days (``ds-6..ds``) and writes ``REPORTS/ds/comparison.html``.
  It runs after ``retrain`` succeeded or was skipped (gated).

Days must run in order, each warm-starting from the model published before it:
``catchup=True`` makes Airflow create a run for every day since ``start_date``,
``max_active_runs=1`` runs them one at a time, oldest first, and ``depends_on_past`` on
``retrain`` holds day ``ds`` until day ``ds-1`` retrained (or was gated), so a failed day
stops the chain instead of being skipped over.

When it runs: a daily DAG run for ``ds`` starts once ``ds`` is over (at ``ds + 1 day``
00:00 in the DAG's timezone), so partition ``ds`` must have landed by then (add a sensor
in front of ``retrain`` if it lands later). With the default windows (train ``{date}``,
gate on ``{date+1}``) the run for ``ds`` trains ``ds`` and holds it, and the run for
``ds + 1`` first gates and publishes it; with
``retrain: {train_dates: "{date-1}", eval_dates: "{date}"}`` each run gates and publishes
at once. See docs/scheduling.md.

Airflow is not a dependency of recsys_dist; this file only needs it where it is
deployed. Settings come from environment variables read when the scheduler parses
the file (``RECSYS_DIST_HOME``, ``RECSYS_DIST_CONFIG``, ``RECSYS_DIST_ROOT``,
``RECSYS_DIST_REPORTS``) and can be changed per run with ``params``.
"""

from __future__ import annotations

import datetime
import os

from airflow import DAG
from airflow.operators.bash import BashOperator

DAG_ID = "recsys_dist_daily"

#: Checkout of the project with its virtualenv in ``.venv`` (commands run from here).
HOME = os.environ.get("RECSYS_DIST_HOME", "/srv/recsys")

#: Params of every run (override per run in the trigger form or with ``--conf``).
PARAMS = {
    "home": HOME,
    # The daily config: it has a retrain: section whose root is ROOT below.
    "config": os.environ.get("RECSYS_DIST_CONFIG", f"{HOME}/configs/daily.yaml"),
    # retrain.root of that config: runs/, published/, CURRENT.
    "root": os.environ.get("RECSYS_DIST_ROOT", f"{HOME}/root"),
    # Offline evaluation reports, one directory per day.
    "reports": os.environ.get("RECSYS_DIST_REPORTS", f"{HOME}/reports/offline_eval"),
    # How many of the newest published models the offline evaluation compares.
    "models": 7,
}

#: ``retrain`` task. Exit 0 (published/held/done), 5 (gated: skipped), else failed.
RETRAIN_COMMAND = (
    "cd {{ params.home }} && "
    ".venv/bin/recsys-dist retrain --config {{ params.config }} --date {{ ds }}"
)

#: ``offline_eval`` task: the newest published models on the last 7 days.
OFFLINE_EVAL_COMMAND = (
    "cd {{ params.home }} && "
    ".venv/bin/python pipelines/offline_eval.py --root {{ params.root }} "
    "--dates {{ macros.ds_add(ds, -6) }}..{{ ds }} --last {{ params.models }} "
    "--out {{ params.reports }}/{{ ds }}"
)

#: Exit code of ``recsys-dist retrain`` when the gate rejected the day's model.
GATED_EXIT = 5

with DAG(
    dag_id=DAG_ID,
    description="Daily warm-started retraining with a publication gate, then an offline "
    "comparison of the published models",
    schedule="@daily",
    # The first day to retrain; with catchup, every day since then gets a run, in order.
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=True,
    # One day at a time: day D warm-starts from the model published for an earlier day.
    max_active_runs=1,
    params=PARAMS,
    default_args={"owner": "recsys", "retries": 0},
    tags=["recsys_dist"],
) as dag:
    retrain = BashOperator(
        task_id="retrain",
        bash_command=RETRAIN_COMMAND,
        # A retry resumes from the run's last complete checkpoint; a day that was
        # already published or gated is recognised and not trained again.
        retries=3,
        retry_delay=datetime.timedelta(minutes=10),
        retry_exponential_backoff=True,
        # Day ds waits for day ds-1 (success or skipped): a failed day stops the chain.
        depends_on_past=True,
        # Gate rejected the model: not an error and not worth retrying.
        skip_on_exit_code=GATED_EXIT,
        execution_timeout=datetime.timedelta(hours=8),
    )
    offline_eval = BashOperator(
        task_id="offline_eval",
        bash_command=OFFLINE_EVAL_COMMAND,
        # Also after a gated (skipped) day: the published models are still worth comparing.
        trigger_rule="none_failed",
        retries=1,
        retry_delay=datetime.timedelta(minutes=10),
        execution_timeout=datetime.timedelta(hours=4),
    )
    retrain >> offline_eval
