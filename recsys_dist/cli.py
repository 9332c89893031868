"""The ``recsys-dist`` command line: its commands and their arguments (docs/cli.md).

Each command is a function of ``commands.py`` taking the parsed arguments; its arguments
are declared here by ``_add_<name>(subcommands)``, with the arguments several commands
share declared once in the small ``_add_...`` helpers above them.

Errors caused by input (configs, data, arguments) print ``error: <message>`` and exit
non-zero (2 for configs and arguments, 3 for data); they never print a traceback (see
:mod:`recsys_dist.console`).
"""

from __future__ import annotations

import argparse
import datetime
from typing import Sequence

import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
from recsys_dist import commands
from recsys_dist.console import (
    add_output_arguments,
    configure_output,
    reporting_errors,
    run_command,
)
from recsys_dist.restart import ProcessRestart


def _date(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# ---- the parser: arguments shared by several commands ---------------------------------------


def _add_config_and_set(sub: argparse.ArgumentParser, of_the_run: bool = False) -> None:
    """``--config`` (required, or defaulting to the run's own) and ``--set``."""
    if of_the_run:
        sub.add_argument(
            "--config",
            help="model/training config YAML (default: the run's own, MODEL_DIR/config.yaml)",
        )
    else:
        sub.add_argument("--config", required=True, help="model/training config YAML")
    sub.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set input.batch_size=1024",
    )


def _add_data(
    sub,
    help_text: str = "data path overriding data.path: a root of dt= "
    "partitions, a directory, a Parquet file or a glob; "
    "local or s3://",
) -> None:
    """``--data`` (``sub`` may be an argument group)."""
    sub.add_argument("--data", help=help_text)


def _add_config_args(sub: argparse.ArgumentParser) -> None:
    """``--config``, ``--set`` and ``--data``."""
    _add_config_and_set(sub)
    _add_data(sub)


def _add_run_args(sub: argparse.ArgumentParser, verb: str, required: bool = True) -> None:
    """``--config`` (default: the run's), ``--set``, ``--model-dir`` and ``--checkpoint``
    of a command that reads a trained run."""
    _add_config_and_set(sub, of_the_run=True)
    sub.add_argument("--model-dir", required=required, help=f"the run to {verb}")
    sub.add_argument(
        "--checkpoint",
        help="a checkpoint directory (default: the newest complete one of --model-dir)",
    )


def _add_retrain_data(sub: argparse.ArgumentParser) -> None:
    _add_data(sub, "override data.path (the root of date partitions)")


# ---- the parser: one function per command ---------------------------------------------------


def _add_data_commands(subcommands) -> None:
    data = subcommands.add_parser("data", help="make or read data")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    _add_synth(data_commands)
    _add_read(data_commands)


def _add_synth(data_commands) -> None:
    synth = data_commands.add_parser(
        "synth",
        help="write synthetic Parquet data (Criteo-like or behaviour histories) "
        "with an oracle logit",
        description="Write OUT/dt=YYYY-MM-DD/part-NNNNN.parquet for N days. Labels come "
        "from a known logistic model; each row stores its true logit in "
        "oracle_logit. --dataset criteo (default): Criteo-like rows, feature "
        "config features/criteo_synth.yaml. --dataset behaviour: a user's item "
        "history (list<int64>, newest last, with each item's category) and a "
        "candidate item whose click depends on its category's matches in the "
        "history; feature config features/behaviour_synth.yaml.",
    )
    synth.add_argument("--dataset", choices=["criteo", "behaviour"], default="criteo")
    synth.add_argument("--out", required=True, help="output directory")
    synth.add_argument("--days", type=_positive, required=True, help="number of daily partitions")
    synth.add_argument("--rows-per-day", type=_positive, required=True, help="rows per day")
    synth.add_argument(
        "--hourly",
        action="store_true",
        help="write hourly partitions, dt=YYYY-MM-DD/hour=HH with a _SUCCESS marker: "
        "--days then counts hours and --rows-per-day is rows per hour",
    )
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument(
        "--start-date",
        type=_date,
        default=datetime.date(2026, 1, 1),
        help="first day, YYYY-MM-DD (default 2026-01-01)",
    )
    synth.add_argument(
        "--rows-per-file",
        type=_positive,
        default=100_000,
        help="rows per Parquet file (default 100000; at least 2 files a day)",
    )
    synth.add_argument("--row-groups-per-file", type=_positive, default=4, help="(default 4)")
    synth.add_argument(
        "--users",
        type=_positive,
        help="user ids drawn from this many users, Zipf-distributed (default 200000 for "
        "criteo, 100000 for behaviour; 5000000 gives a long tail)",
    )
    synth.add_argument(
        "--history-length",
        type=_positive,
        help="behaviour: histories of 0..N items, the label reading all (default 0..80, 50 read)",
    )
    synth.add_argument(
        "--drift",
        type=float,
        default=0.0,
        help="radians per partition by which the click model turns toward another (criteo)",
    )
    synth.set_defaults(func=commands.synth)


def _add_read(data_commands) -> None:
    read = data_commands.add_parser(
        "read", help="read one pass of a split on a local cluster through the worker input path"
    )
    _add_config_args(read)
    read.add_argument(
        "--split",
        choices=["train", "eval", "validation"],
        default="train",
        help="which split of data: to read (default train)",
    )
    read.add_argument("--workers", type=_positive, help="workers (default cluster.workers)")
    read.add_argument("--ps", type=_positive, help="parameter servers (default cluster.ps)")
    read.add_argument("--log-dir", help="directory for the server logs (default: a temp dir)")
    read.add_argument(
        "--check",
        action="store_true",
        help="collect every row id and check each planned row was read exactly once",
    )
    read.set_defaults(func=commands.read)


def _add_validate(subcommands) -> None:
    validate = subcommands.add_parser(
        "validate",
        help="check a config, then the data's schema against it",
        description="Checks the config and the feature config it names. With --data (or the "
        "config's data section and --split), reads every Parquet footer and checks "
        "columns, types, null labels and bad files. --scan also reads every row "
        "through the in-graph input function and checks its values, then counts "
        "each table's distinct ids and how often hashed ids share a row.",
    )
    _add_config_args(validate)
    validate.add_argument(
        "--split",
        choices=["train", "eval", "validation", "all"],
        default=None,
        help="with --data: apply this split's dates under the path (default: "
        "all files under it); without --data: check this split of "
        "data.path (default: every configured split)",
    )
    validate.add_argument(
        "--scan",
        action="store_true",
        help="also read every row in-graph and check its values; report "
        "each table's distinct ids and hash collisions",
    )
    validate.set_defaults(func=commands.validate)


def _add_train(subcommands) -> None:
    train = subcommands.add_parser(
        "train",
        help="train a model on a parameter-server cluster, then evaluate it",
        description="Trains config.model on the training split with embeddings sharded over "
        "the parameter servers and asynchronous steps scheduled on the workers, "
        "then evaluates on data.eval (AUC and logloss next to the oracle's when "
        "the data has oracle logits). Writes TensorBoard summaries, the resolved "
        "config and train_result.json to --model-dir.",
    )
    _add_config_args(train)
    train.add_argument("--model-dir", help="output directory (default runs/<config name>)")
    train.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    train.add_argument(
        "--warm-start",
        metavar="RUN_OR_CHECKPOINT",
        help="start a new model dir from another run's weights, optimizer "
        "slots and step (its newest complete checkpoint, or the "
        "checkpoint directory given): feature drift is handled as in "
        "daily retraining, dynamic tables are re-sharded to this run's "
        "parameter servers. "
        "Ignored when --model-dir already has a checkpoint (it resumes)",
    )
    train.set_defaults(func=commands.train)


def _add_evaluate(subcommands) -> None:
    evaluate = subcommands.add_parser(
        "evaluate",
        help="score a checkpoint on a split and write metrics and an HTML report",
        description="Scores every row of the evaluation data once with a checkpoint "
        "(training=False) on the config's cluster, and writes metrics.json, "
        "predictions.parquet and a self-contained report.html to --out: AUC, "
        "GAUC, logloss, normalised entropy, calibration, slices and the oracle's "
        "AUC/logloss when the data has its logit. See docs/evaluation.md.",
    )
    _add_run_args(evaluate, "evaluate")
    where = evaluate.add_mutually_exclusive_group()
    _add_data(
        where,
        "evaluation data: a root with date partitions (the config's data.eval "
        "dates apply), a directory, a file or a glob",
    )
    where.add_argument(
        "--dates",
        help="FROM..TO (or one date) of partitions under data.path "
        "(default: the config's data.eval)",
    )
    evaluate.add_argument("--out", required=True, help="output directory (local or s3://)")
    evaluate.add_argument(
        "--baseline",
        help="compare against: another run's model dir, or a metrics.json written by evaluate",
    )
    evaluate.set_defaults(func=commands.evaluate)


def _add_retrain(subcommands) -> None:
    retrain = subcommands.add_parser(
        "retrain",
        help="retrain on a date's partitions, gate against the previous model, publish",
        description="One day of scheduled retraining (the config's retrain: section): "
        "train on the date's window (warm-started from the previous published "
        "model), evaluate against that model on the held-out partition, and "
        "publish (export, manifest, _SUCCESS) only if it is not worse by more "
        "than retrain.gate.max_drop. Rerunning a date is idempotent. Exit "
        "codes: 0 published or held, 5 gated, 2 config, 3 data, 4 cluster lost. "
        "Same as pipelines/daily_retrain.py. See docs/retrain.md.",
    )
    _add_config_and_set(retrain)
    retrain.add_argument("--date", required=True, type=_date, help="run date, YYYY-MM-DD")
    _add_retrain_data(retrain)
    retrain.set_defaults(func=commands.retrain)


def _add_backfill(subcommands) -> None:
    backfill = subcommands.add_parser(
        "backfill",
        help="run retrain for every date of a range, in order",
        description="Runs recsys-dist retrain for each date from --from to --to, oldest "
        "first; published or gated days are skipped quickly on a rerun.",
    )
    _add_config_and_set(backfill)
    backfill.add_argument(
        "--from", dest="first", required=True, type=_date, help="first date, YYYY-MM-DD"
    )
    backfill.add_argument(
        "--to", dest="last", required=True, type=_date, help="last date, YYYY-MM-DD"
    )
    _add_retrain_data(backfill)
    backfill.set_defaults(func=commands.retrain)


OFFLINE_EVAL_DESCRIPTION = (
    "Score published models on the same days and compare them: per-model reports plus "
    "comparison.json and a self-contained comparison.html."
)


def add_offline_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``recsys-dist offline-eval`` (and ``pipelines/offline_eval.py``)."""
    parser.add_argument(
        "--root", required=True, help="retraining root holding published/<date>/ (local or s3://)"
    )
    parser.add_argument(
        "--dates", required=True, help="evaluation partitions, FROM..TO or one date (YYYY-MM-DD)"
    )
    parser.add_argument(
        "--models",
        help="comma-separated dates of the published models to "
        "evaluate (default: every published model)",
    )
    parser.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="only the N newest of those models (e.g. 7 for the last week's)",
    )
    _add_data(parser, "data root overriding each model's data.path")
    parser.add_argument("--out", required=True, help="output directory (local or s3://)")
    parser.set_defaults(func=commands.offline_eval)


def _add_offline_eval(subcommands) -> None:
    offline_eval = subcommands.add_parser(
        "offline-eval",
        help="score published models on the same days and compare them",
        description=OFFLINE_EVAL_DESCRIPTION + " The oldest model is the reference. Exit "
        "codes: 0 done, 2 arguments or publication, 3 data, 4 cluster lost. "
        "Same as pipelines/offline_eval.py. See docs/scheduling.md.",
    )
    add_offline_eval_arguments(offline_eval)


def _add_export(subcommands) -> None:
    export = subcommands.add_parser(
        "export",
        help="write a SavedModel that stock TensorFlow Serving serves",
        description="Writes a SavedModel whose serving_default signature takes the raw "
        "Parquet columns (same names and types) and returns a probability per "
        "label. Feature transforms run in-graph; sharded tables become plain "
        "variables, so serving needs no parameter server. See docs/export.md.",
    )
    _add_run_args(export, "export", required=False)
    export.add_argument(
        "--out", required=True, help="output directory (must not exist or be empty)"
    )
    chain = export.add_argument_group("a published chain instead of --model-dir")
    chain.add_argument("--base", help="a base version of follow's published/ (or published/)")
    chain.add_argument("--deltas", nargs="+", default=[], help="its delta versions, in order")
    export.set_defaults(func=commands.export)


def _add_follow(subcommands) -> None:
    follow = subcommands.add_parser(
        "follow",
        help="train each partition as it lands, publish deltas of the rows that changed",
        description="One long-running run (the config's follow: section): trains every "
        "complete partition (dt=YYYY-MM-DD/hour=HH with a _SUCCESS marker) once, oldest "
        "first, warm-started from the one before, and publishes a delta or a full base "
        "every follow.publish_every partitions. Killed, it resumes where it stopped. "
        "See docs/follow.md.",
    )
    _add_config_and_set(follow)
    _add_data(follow, "override data.path (the root of the partitions)")
    follow.add_argument(
        "--until-idle", type=float, metavar="SECONDS", help="stop when idle this long"
    )
    follow.set_defaults(func=commands.follow)


def _add_plan(subcommands) -> None:
    plan = subcommands.add_parser(
        "plan",
        help="the smallest cluster for a rate, memory per server, bytes per step",
        description="Plans a parameter-server cluster for a config: memory per server per "
        "table, bytes per step to and from each server, the smallest cluster "
        "(workers, servers) that trains --examples-per-second, and which "
        "resource binds first (worker CPU, server CPU, server NIC, the chief's "
        "dispatch). Rates per core are measured (docs/scaling.md); the flags "
        "below override them.",
    )
    _add_config_args(plan)
    plan.add_argument("--examples-per-second", required=True, help="target training rate")
    plan.add_argument(
        "--nic-gbit",
        default="10",
        help="a server's network bandwidth, Gbit/s each way (default 10)",
    )
    plan.add_argument(
        "--server-memory-gib", help="a server's memory for the model, GiB (default: not checked)"
    )
    plan.add_argument(
        "--worker-cores", type=_positive, default=1, help="cores of one worker task (default 1)"
    )
    plan.add_argument(
        "--server-cores",
        type=_positive,
        default=1,
        help="cores of one parameter-server task (default 1)",
    )
    plan.add_argument(
        "--sample-batches",
        type=_positive,
        default=20,
        help="training batches read to count distinct rows (default 20)",
    )
    for flag, what in (
        ("--worker-examples-per-core", "examples/s one worker core trains"),
        ("--server-values-per-core", "float32 values/s one server core serves"),
        ("--server-step-ms", "CPU ms one server core spends per step besides its values"),
        ("--chief-closures-per-second", "closures/s one chief dispatches"),
    ):
        plan.add_argument(flag, help=f"{what} (default: measured, docs/scaling.md)")
    plan.set_defaults(func=commands.plan)


def _add_server(subcommands) -> None:
    from recsys_dist.cluster.server import add_server_arguments

    server = subcommands.add_parser(
        "server",
        help="run one worker or parameter-server task (multi-machine clusters)",
        description="Runs a TensorFlow server task for cluster.mode: tf_config. Without "
        "--job/--index/--cluster-spec it reads them from TF_CONFIG.",
    )
    add_server_arguments(server)
    server.set_defaults(func=commands.server)


#: The commands of ``recsys-dist``, in the order ``--help`` lists them.
_COMMANDS = (
    _add_data_commands,
    _add_validate,
    _add_train,
    _add_evaluate,
    _add_retrain,
    _add_backfill,
    _add_follow,
    _add_offline_eval,
    _add_export,
    _add_plan,
    _add_server,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``recsys-dist``."""
    parser = argparse.ArgumentParser(
        prog="recsys-dist",
        description="Train sparse CTR / ranking models on TensorFlow parameter servers.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subcommands)
    add_output_arguments(parser)  # -q/-v before or after any command's name
    return parser


# ---- running --------------------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    restart: ProcessRestart | None = None,
) -> int:
    """Runs the command line; returns the exit code.

    Args:
      argv: Arguments without the program name; defaults to ``sys.argv[1:]``.
      parser: Parses ``argv`` instead of :func:`build_parser`'s (e.g. the parser of
        ``pipelines/offline_eval.py``); it must set ``func``, ``quiet`` and ``verbose``
        (:func:`~recsys_dist.console.add_output_arguments`).
      restart: The process's restart after a lost task, given to the command as
        ``args.restart``; by default one that is never carried out (a command that
        asks for it returns :data:`~recsys_dist.restart.RESTART_EXIT`).
    """
    args = (parser or build_parser()).parse_args(argv)
    args.restart = restart if restart is not None else ProcessRestart(execv=None)
    configure_output(quiet=args.quiet, verbose=args.verbose)
    return reporting_errors(lambda: args.func(args))


def run() -> None:
    """Console-script entry point: :func:`main` under
    :func:`recsys_dist.console.run_command` (signals, ``error:`` lines, ``os._exit``),
    starting the command again after a lost parameter server
    (:class:`~recsys_dist.restart.ProcessRestart`)."""
    restart = ProcessRestart()
    run_command(lambda: main(restart=restart), before_exit=restart.exec_if_due)


if __name__ == "__main__":
    run()
