"""The ``recsys-dist`` command line.

Commands:
  data synth    Write synthetic Criteo-like Parquet data with an oracle logit.
  validate      Check a config, then the data's schema (and, with --scan, every value).
  data read     Read one pass of a split on a local cluster through the worker input path.
  train         Train a model on a parameter-server cluster, then evaluate it held out.
  evaluate      Score a checkpoint on a split; write metrics and an HTML report.
  retrain       One day of scheduled retraining: train, gate, publish.
  backfill      Retrain every date of a range, in order.
  offline-eval  Score published models on the same days and compare them.
  export        Write a SavedModel that TensorFlow Serving serves.
  plan          The smallest cluster for a training rate; memory and bytes per server.
  server        Run one worker or parameter-server task of a multi-machine cluster.

Each command is a ``_cmd_<name>(args)`` function; its arguments are declared by
``_add_<name>(commands)``, with the arguments several commands share declared once in
the small ``_add_...`` helpers above them.

Errors caused by input (configs, data, arguments) print ``error: <message>`` and exit
non-zero (2 for configs and arguments, 3 for data); they never print a traceback (see
:mod:`recsys_dist.console`).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import time
from typing import Sequence

import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
from recsys_dist.console import (
    add_output_arguments,
    configure_output,
    reporting_errors,
    run_command,
)
from recsys_dist.errors import RecsysError


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


def _cmd_synth(args: argparse.Namespace) -> int:
    from recsys_dist.data.synth import RowGenerator
    from recsys_dist.data.synth_behaviour import BehaviourGenerator
    from recsys_dist.data.synth_files import synthesize

    generator = {"criteo": RowGenerator, "behaviour": BehaviourGenerator}[args.dataset]
    try:
        report = synthesize(args.out, days=args.days, rows_per_day=args.rows_per_day,
                            seed=args.seed, start_date=args.start_date,
                            rows_per_file=args.rows_per_file,
                            row_groups_per_file=args.row_groups_per_file,
                            users=args.users or (200_000 if args.dataset == "criteo"
                                                 else 100_000),
                            generator_class=generator,
                            progress=(lambda line: print(line, file=sys.stderr))
                            if not args.quiet else None)
    except ValueError as exc:
        raise RecsysError(str(exc)) from None
    rates = f"click rate {report.click_rate:.3f}"
    if report.conversion_rate is not None:
        rates += f", conversion rate {report.conversion_rate:.4f}"
    print(f"wrote {report.rows:,} rows in {len(report.files)} files to {report.out_dir} "
          f"({report.days[0]}..{report.days[-1]}) in {report.seconds:.1f}s; {rates}")
    return 0


def _describe_plan(pipeline) -> list[str]:
    plan = pipeline.plan
    per_worker = plan.rows_per_worker()
    balance = min(per_worker) / max(per_worker) if max(per_worker) else 1.0
    lines = [f"data     {len(plan.files)} files, {plan.total_rows:,} rows, {len(plan.units)} units",
             f"schema   OK: {len(pipeline.transform.columns)} columns ("
             + ", ".join(f"{c} {pipeline.transform.column_dtypes[c]}"
                         for c in pipeline.transform.columns[:6]) + ", ...)",
             f"plan     {plan.num_workers} workers: "
             + " / ".join(f"{r:,}" for r in per_worker) + f" rows (balance {balance:.2f})"]
    for s in plan.skipped:
        lines.append(f"skipped  {s.path}: {s.reason}" + (f" ({s.rows:,} rows)" if s.rows else ""))
    return lines


def _cmd_validate(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config

    config = load_config(args.config, args.set).with_data_path(args.data)
    feats = config.features
    print(f"config   {config.file}: OK ({len(feats.features)} features, {len(feats.tables)} "
          f"tables, labels {', '.join(config.labels)}; model {config.model.name}; "
          f"feature config {feats.file})")
    replicas, batch = config.cluster.workers, config.input.batch_size
    if config.cluster.strategy == "mirrored":
        print(f"strategy mirrored: {replicas} replicas in one process, each step's "
              f"{batch:,} rows split {batch // replicas:,} per replica")
    elif config.cluster.strategy == "multi_worker_mirrored":
        print(f"strategy multi_worker_mirrored: {replicas} worker processes, each step's "
              f"{batch:,} rows split {batch // replicas:,} per worker")
    if args.data is not None:
        splits = [None if args.split in (None, "all") else args.split]
    elif args.split not in (None, "all"):
        splits = [args.split]
    elif config.data is not None:
        splits = [s for s in ("train", "eval", "validation")
                  if getattr(config.data, s) is not None] or [None]
    else:
        print("data     not checked (no --data and no data section in the config)")
        return 0
    from recsys_dist.data.collisions import SAMPLE_ROWS, collision_warnings, table_ids
    from recsys_dist.data.history_lengths import history_lengths
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.data.read_pass import read_pass_local

    for split in splits:
        if split is not None:
            print(f"split    {split}")
        pipeline = prepare_input(config, split, config.cluster.workers)
        for line in _describe_plan(pipeline):
            print(line)
        if args.scan:
            result = read_pass_local(pipeline.single_worker())
            print(f"scan     read {result.rows:,} rows in-graph in {result.seconds:.1f}s: "
                  f"{result.skipped_rows:,} bad rows skipped")
            for table in table_ids(pipeline, config.cluster.ps):
                for line in table.lines():
                    print(line)
            for history in history_lengths(pipeline):
                print(history.line())
        elif split in (None, "train"):
            warnings = collision_warnings(pipeline, config.cluster.ps)
            for line in warnings:
                print(line)
            if not warnings:
                print(f"tables   no hashed table shares rows often in the first "
                      f"{SAMPLE_ROWS:,} rows (--scan counts every row)")
    return 0


def _cmd_read(args: argparse.Namespace) -> int:
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.config import load_config
    from recsys_dist.config.experiment import ClusterSpec
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.data.read_pass import read_pass_on_cluster
    from recsys_dist.progress import Progress

    config = load_config(args.config, args.set).with_data_path(args.data)
    # A read check runs on this machine: a tf_config job's cluster is read locally.
    mode = "in_process" if config.cluster.mode == "in_process" else "local"
    cluster = ClusterSpec(mode, args.workers or config.cluster.workers,
                          args.ps or config.cluster.ps)
    pipeline = prepare_input(config, args.split, cluster.workers)
    for line in _describe_plan(pipeline):
        print(line)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="recsys_dist_cluster_")
    with connect(cluster, log_dir, config.train.embedding_shard_bytes) as runtime:
        print(f"cluster  {runtime.describe()}")
        result = read_pass_on_cluster(pipeline, runtime.strategy, runtime.coordinator,
                                      collect_rows=args.check, progress=Progress("rows"))
    print(f"read     {result.rows:,} rows in {result.seconds:.1f}s "
          f"({result.rows_per_second:,.0f} rows/s); per worker "
          + " / ".join(f"{r:,}" for r in result.rows_per_worker)
          + f"; {result.skipped_rows:,} bad rows skipped")
    if args.check:
        from recsys_dist.data.read_pass import check_exactly_once

        check_exactly_once(pipeline.plan, result.row_ids)
        print(f"check    every planned row was read exactly once ({len(result.row_ids):,} rows)")
    return 0


#: Exit code of a ``train`` attempt that asks ``run()`` to start it again (lost ps).
RESTART_EXIT = 75
_restart_as: int | None = None  # set by _cmd_train: the restart number to exec as


def restart_after(exc, config) -> int:
    """Handles a lost parameter server: returns RESTART_EXIT so :func:`run` starts this
    command again (which resumes from the last checkpoint), or re-raises past
    ``train.max_restarts``."""
    global _restart_as
    from recsys_dist.errors import ClusterLost

    restart = int(os.environ.get("RECSYS_DIST_RESTART", "0"))
    if restart >= config.train.max_restarts:
        raise ClusterLost(f"{exc} (gave up after train.max_restarts = "
                          f"{config.train.max_restarts} restarts)") from None
    print(f"restart  {exc}; starting the cluster again and resuming from the last "
          f"checkpoint (restart {restart + 1} of at most {config.train.max_restarts})",
          flush=True)
    _restart_as = restart + 1
    time.sleep(min(30, 2 ** restart))  # let an orchestrator bring the servers back
    return RESTART_EXIT


def _cmd_train(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.errors import ClusterLost
    from recsys_dist.train.run import train_run

    config = load_config(args.config, args.set).with_data_path(args.data)
    model_dir = args.model_dir or os.path.join(
        "runs", os.path.splitext(os.path.basename(config.file))[0])
    warm = None
    if args.warm_start:
        from recsys_dist.checkpoint.store import checkpoint_at

        warm = checkpoint_at(args.warm_start, "--warm-start")
    resize = config.retrain.on_table_resize if config.retrain is not None else "fail"
    try:
        train_run(config, model_dir, evaluate=not args.no_eval, warm_start_from=warm,
                  on_table_resize=resize)
    except ClusterLost as exc:
        return restart_after(exc, config)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.evaluation.job import run_evaluation
    from recsys_dist.progress import Progress

    dates = {"data.eval": {"dates": args.dates}} if args.dates is not None else None
    config = load_config(args.config or run_config(args.model_dir), args.set, dates,
                         source="--dates").with_data_path(args.data)
    result = run_evaluation(config, args.model_dir, args.out, checkpoint=args.checkpoint,
                            baseline=args.baseline,
                            progress=None if args.quiet else Progress("scored rows"))
    metrics = result.metrics
    print(f"evaluated {metrics['rows']:,} rows of checkpoint {metrics['checkpoint']} "
          f"(step {metrics['step']:,}) at {result.rows_per_second:,.0f} rows/s")
    def f(value, digits: int = 4) -> str:  # a metric is null when one class is absent
        return "n/a" if value is None else f"{value:.{digits}f}"

    for label, m in metrics["labels"].items():
        line = (f"  {label}: AUC {f(m['auc'])}, logloss {f(m['logloss'])}, NE "
                f"{f(m['normalized_entropy'])}, calibration {f(m['calibration']['ratio'], 3)}")
        if "gauc" in m:
            g = m["gauc"]
            line += (f", GAUC {f(g['gauc'])} ({g['groups']:,} groups; "
                     f"{g['skipped_groups']:,} single-class groups skipped)")
        if "oracle" in m:
            line += f" | oracle AUC {f(m['oracle']['auc'])}, logloss {f(m['oracle']['logloss'])}"
        print(line)
        delta = metrics.get("comparison", {}).get("labels", {}).get(label)
        if delta:
            boot = delta.get("bootstrap")
            print(f"  vs baseline: AUC {delta['delta']['auc']:+.4f}"
                  + (f" (95% CI {boot['low']:+.4f}..{boot['high']:+.4f})" if boot else "")
                  + f", logloss {delta['delta']['logloss']:+.4f}")
    print(f"report   {result.report}")
    return 0


def run_config(model_dir: str) -> str:
    """The local path of ``MODEL_DIR/config.yaml``, the resolved config ``train`` writes
    there (with its feature config beside it; copied to a temp dir when remote)."""
    from recsys_dist import storage_io
    from recsys_dist.config.experiment import CONFIG_FILE, FEATURES_FILE
    from recsys_dist.errors import ConfigError

    path = storage_io.join(model_dir, CONFIG_FILE)
    with storage_io.errors_named(model_dir, "read the run's config"):
        if not storage_io.exists(path):
            raise ConfigError(path, "", "not found, and no --config was given; it is written "
                                        "when train starts: pass --config, or check "
                                        "--model-dir")
        if not storage_io.is_remote(model_dir):
            return path
        local = tempfile.mkdtemp(prefix="recsys_dist_config_")
        for name in (CONFIG_FILE, FEATURES_FILE):
            with open(os.path.join(local, name), "w", encoding="utf-8") as handle:
                handle.write(storage_io.read_text(storage_io.join(model_dir, name)))
    return os.path.join(local, CONFIG_FILE)


def _cmd_export(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    config = load_config(args.config or run_config(args.model_dir), args.set)
    result = export_model(config, args.model_dir, args.out, checkpoint=args.checkpoint)
    inputs = ", ".join(f"{c}:{d}" for c, d in result.inputs.items())
    lists = [c for c, d in result.inputs.items() if d.startswith("list<")]
    print(f"exported step {result.step:,} of {result.checkpoint} to {result.out_dir}\n"
          f"  serving_default inputs ({len(result.inputs)} columns): {inputs}\n"
          + (f"  list columns are padded [N, L] inputs plus <column>_lengths: "
             f"{', '.join(lists)}\n" if lists else "")
          + "  serving_nullable: the same plus <column>_valid per scalar column\n"
          f"  outputs: {', '.join(result.outputs)} (probabilities)")
    return 0


def _cmd_retrain(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.errors import ClusterLost
    from recsys_dist.retrain.daily import backfill, retrain_day

    try:
        if args.command == "retrain":
            return retrain_day(args.config, args.set, args.date, args.data).exit_code
        outcomes = backfill(args.config, args.set, args.first, args.last, args.data)
    except ClusterLost as exc:
        return restart_after(exc, load_config(args.config, args.set))
    print("backfill " + ", ".join(f"{o.date} {o.status}" for o in outcomes))
    return 0


def _cmd_offline_eval(args: argparse.Namespace) -> int:
    from recsys_dist.evaluation.comparison_report import comparison_text
    from recsys_dist.retrain.offline_eval import evaluate_published

    models = [m for m in args.models.split(",") if m.strip()] if args.models else None
    comparison = evaluate_published(
        args.root, args.dates, args.out, models=models, data_path=args.data, last=args.last,
        log=lambda line: print(line, file=sys.stderr, flush=True))
    for line in comparison_text(comparison):
        print(line)
    print(f"report   {comparison['html']}")
    return 0


def _positive_flag(args: argparse.Namespace, flag: str, what: str) -> float | None:
    """The value of ``--flag`` as a positive number (None when not given)."""
    text = getattr(args, flag.lstrip("-").replace("-", "_"))
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise RecsysError(f"{flag} must be a positive number ({what}), got {text!r}")
    return value


def _plan_rows(args: argparse.Namespace, config) -> tuple[dict[str, float] | None, str]:
    """Distinct rows per batch measured on the training data (``--data``, else the
    config's train split), or None and why not."""
    from recsys_dist.data.batch_rows import distinct_rows_per_batch
    from recsys_dist.data.input_fn import prepare_input

    if config.data is None:
        return None, "no data to measure them on (give --data)"
    split = "train" if args.data is None and config.data.train is not None else None
    try:
        pipeline = prepare_input(config, split, 1)
    except RecsysError as exc:
        if args.data is not None:
            raise
        return None, f"the config's training data is not readable ({exc})"
    distinct, batches = distinct_rows_per_batch(pipeline, config.features, args.sample_batches)
    return distinct, f"measured on {batches} batches of {config.data.path}"


def _cmd_plan(args: argparse.Namespace) -> int:
    from recsys_dist.cluster import capacity
    from recsys_dist.config import load_config

    target = _positive_flag(args, "--examples-per-second", "examples per second to train")
    nic = _positive_flag(args, "--nic-gbit", "a server's network bandwidth in Gbit/s")
    memory = _positive_flag(args, "--server-memory-gib", "a server's memory in GiB")
    measured = capacity.MEASURED_RATES
    rates = capacity.Rates(*(
        _positive_flag(args, flag, what) or default for flag, what, default in (
            ("--worker-examples-per-core", "examples/s", measured.worker_examples_per_core),
            ("--server-values-per-core", "values/s", measured.server_values_per_core),
            ("--chief-closures-per-second", "closures/s", measured.chief_closures))))
    machines = capacity.Machines(nic * 1e9 / 8, memory * 2**30 if memory else None,
                                 args.worker_cores, args.server_cores)
    config = load_config(args.config, args.set).with_data_path(args.data)
    from recsys_dist.models.footprint import model_footprint

    footprint = model_footprint(config)
    distinct, source = _plan_rows(args, config)
    print(f"model    {config.model.name}, batch {config.input.batch_size:,}, "
          f"{config.train.steps_per_call} steps per call; {len(footprint.stacks)} stacked "
          f"table weight(s), {len(footprint.dynamic)} dynamic table(s), "
          f"{footprint.dense_parameters:,} dense parameters in {len(footprint.dense)} variables")
    print(f"rows     distinct rows per batch: {source}" if distinct is not None else
          f"rows     distinct rows per batch: ids spread evenly (an upper bound); {source}")
    print(f"rates    {rates.worker_examples_per_core:,.0f} examples/s per worker core, "
          f"{rates.server_values_per_core:,.0f} values/s per server core, "
          f"{rates.chief_closures:,.0f} closures/s per chief; NIC {nic:g} Gbit/s per server"
          + (f", {memory:g} GiB per server" if memory else ", server memory not checked"))
    result = capacity.plan(footprint, config, target, rates, machines, distinct)
    for line in capacity.plan_lines(result, config):
        print(line)
    return 0


def _cmd_server(args: argparse.Namespace) -> int:
    from recsys_dist.cluster import server

    return server.run_task(args)


# ---- the parser: arguments shared by several commands ---------------------------------------


def _add_config_and_set(sub: argparse.ArgumentParser, of_the_run: bool = False) -> None:
    """``--config`` (required, or defaulting to the run's own) and ``--set``."""
    if of_the_run:
        sub.add_argument("--config", help="model/training config YAML (default: the "
                                          "run's own, MODEL_DIR/config.yaml)")
    else:
        sub.add_argument("--config", required=True, help="model/training config YAML")
    sub.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set input.batch_size=1024")


def _add_data(sub, help_text: str = "data path overriding data.path: a root of dt= "
                                    "partitions, a directory, a Parquet file or a glob; "
                                    "local or s3://") -> None:
    """``--data`` (``sub`` may be an argument group)."""
    sub.add_argument("--data", help=help_text)


def _add_config_args(sub: argparse.ArgumentParser) -> None:
    """``--config``, ``--set`` and ``--data``."""
    _add_config_and_set(sub)
    _add_data(sub)


def _add_run_args(sub: argparse.ArgumentParser, verb: str) -> None:
    """``--config`` (default: the run's), ``--set``, ``--model-dir`` and ``--checkpoint``
    of a command that reads a trained run."""
    _add_config_and_set(sub, of_the_run=True)
    sub.add_argument("--model-dir", required=True, help=f"the run to {verb}")
    sub.add_argument("--checkpoint", help="a checkpoint directory (default: the newest "
                                          "complete one of --model-dir)")


def _add_retrain_data(sub: argparse.ArgumentParser) -> None:
    _add_data(sub, "override data.path (the root of date partitions)")


# ---- the parser: one function per command ---------------------------------------------------


def _add_data_commands(commands) -> None:
    data = commands.add_parser("data", help="make or read data")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    _add_synth(data_commands)
    _add_read(data_commands)


def _add_synth(data_commands) -> None:
    synth = data_commands.add_parser(
        "synth", help="write synthetic Parquet data (Criteo-like or behaviour histories) "
                      "with an oracle logit",
        description="Write OUT/dt=YYYY-MM-DD/part-NNNNN.parquet for N days. Labels come "
                    "from a known logistic model; each row stores its true logit in "
                    "oracle_logit. --dataset criteo (default): Criteo-like rows, feature "
                    "config features/criteo_synth.yaml. --dataset behaviour: a user's item "
                    "history (list<int64>, newest last, with each item's category) and a "
                    "candidate item whose click depends on its category's matches in the "
                    "history; feature config features/behaviour_synth.yaml.")
    synth.add_argument("--dataset", choices=["criteo", "behaviour"], default="criteo",
                       help="what the rows look like (default criteo)")
    synth.add_argument("--out", required=True, help="output directory")
    synth.add_argument("--days", type=_positive, required=True, help="number of daily partitions")
    synth.add_argument("--rows-per-day", type=_positive, required=True, help="rows per day")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--start-date", type=_date, default=datetime.date(2026, 1, 1),
                       help="first day, YYYY-MM-DD (default 2026-01-01)")
    synth.add_argument("--rows-per-file", type=_positive, default=100_000,
                       help="rows per Parquet file (default 100000; at least 2 files a day)")
    synth.add_argument("--row-groups-per-file", type=_positive, default=4,
                       help="row groups per file (default 4)")
    synth.add_argument("--users", type=_positive, default=None,
                       help="user ids drawn from this many users, Zipf-distributed "
                            "(default 200000 for criteo, 100000 for behaviour; e.g. 5000000 "
                            "for a long tail of ids that collide in the demo's hashed user "
                            "table)")
    synth.set_defaults(func=_cmd_synth)


def _add_read(data_commands) -> None:
    read = data_commands.add_parser(
        "read", help="read one pass of a split on a local cluster through the worker input path")
    _add_config_args(read)
    read.add_argument("--split", choices=["train", "eval", "validation"], default="train",
                      help="which split of data: to read (default train)")
    read.add_argument("--workers", type=_positive, help="workers (default cluster.workers)")
    read.add_argument("--ps", type=_positive, help="parameter servers (default cluster.ps)")
    read.add_argument("--log-dir", help="directory for the server logs (default: a temp dir)")
    read.add_argument("--check", action="store_true",
                      help="collect every row id and check each planned row was read exactly once")
    read.set_defaults(func=_cmd_read)


def _add_validate(commands) -> None:
    validate = commands.add_parser(
        "validate", help="check a config, then the data's schema against it",
        description="Checks the config and the feature config it names. With --data (or the "
                    "config's data section and --split), reads every Parquet footer and checks "
                    "columns, types, null labels and bad files. --scan also reads every row "
                    "through the in-graph input function and checks its values, then counts "
                    "each table's distinct ids and how often hashed ids share a row.")
    _add_config_args(validate)
    validate.add_argument("--split", choices=["train", "eval", "validation", "all"],
                          default=None,
                          help="with --data: apply this split's dates under the path (default: "
                               "all files under it); without --data: check this split of "
                               "data.path (default: every configured split)")
    validate.add_argument("--scan", action="store_true",
                          help="also read every row in-graph and check its values; report "
                               "each table's distinct ids and hash collisions")
    validate.set_defaults(func=_cmd_validate)


def _add_train(commands) -> None:
    train = commands.add_parser(
        "train", help="train a model on a parameter-server cluster, then evaluate it",
        description="Trains config.model on the training split with embeddings sharded over "
                    "the parameter servers and asynchronous steps scheduled on the workers, "
                    "then evaluates on data.eval (AUC and logloss next to the oracle's when "
                    "the data has oracle logits). Writes TensorBoard summaries, the resolved "
                    "config and train_result.json to --model-dir.")
    _add_config_args(train)
    train.add_argument("--model-dir", help="output directory (default runs/<config name>)")
    train.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    train.add_argument("--warm-start", metavar="RUN_OR_CHECKPOINT",
                       help="start a new model dir from another run's weights, optimizer "
                            "slots and step (its newest complete checkpoint, or the "
                            "checkpoint directory given): feature drift is handled as in "
                            "daily retraining, dynamic tables are re-sharded to this run's "
                            "parameter servers. "
                            "Ignored when --model-dir already has a checkpoint (it resumes)")
    train.set_defaults(func=_cmd_train)


def _add_evaluate(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="score a checkpoint on a split and write metrics and an HTML report",
        description="Scores every row of the evaluation data once with a checkpoint "
                    "(training=False) on the config's cluster, and writes metrics.json, "
                    "predictions.parquet and a self-contained report.html to --out: AUC, "
                    "GAUC, logloss, normalised entropy, calibration, slices and the oracle's "
                    "AUC/logloss when the data has its logit. See docs/evaluation.md.")
    _add_run_args(evaluate, "evaluate")
    where = evaluate.add_mutually_exclusive_group()
    _add_data(where, "evaluation data: a root with date partitions (the config's data.eval "
                     "dates apply), a directory, a file or a glob")
    where.add_argument("--dates", help="FROM..TO (or one date) of partitions under data.path "
                                       "(default: the config's data.eval)")
    evaluate.add_argument("--out", required=True, help="output directory (local)")
    evaluate.add_argument("--baseline", help="compare against: another run's model dir, or a "
                                             "metrics.json written by evaluate")
    evaluate.set_defaults(func=_cmd_evaluate)


def _add_retrain(commands) -> None:
    retrain = commands.add_parser(
        "retrain", help="retrain on a date's partitions, gate against the previous model, "
                        "publish",
        description="One day of scheduled retraining (the config's retrain: section): "
                    "train on the date's window (warm-started from the previous published "
                    "model), evaluate against that model on the held-out partition, and "
                    "publish (export, manifest, _SUCCESS) only if it is not worse by more "
                    "than retrain.gate.max_drop. Rerunning a date is idempotent. Exit "
                    "codes: 0 published or held, 5 gated, 2 config, 3 data, 4 cluster lost. "
                    "Same as pipelines/daily_retrain.py. See docs/retrain.md.")
    _add_config_and_set(retrain)
    retrain.add_argument("--date", required=True, type=_date, help="run date, YYYY-MM-DD")
    _add_retrain_data(retrain)
    retrain.set_defaults(func=_cmd_retrain)


def _add_backfill(commands) -> None:
    backfill = commands.add_parser(
        "backfill", help="run retrain for every date of a range, in order",
        description="Runs recsys-dist retrain for each date from --from to --to, oldest "
                    "first; published or gated days are skipped quickly on a rerun.")
    _add_config_and_set(backfill)
    backfill.add_argument("--from", dest="first", required=True, type=_date,
                          help="first date, YYYY-MM-DD")
    backfill.add_argument("--to", dest="last", required=True, type=_date,
                          help="last date, YYYY-MM-DD")
    _add_retrain_data(backfill)
    backfill.set_defaults(func=_cmd_retrain)


OFFLINE_EVAL_DESCRIPTION = (
    "Score published models on the same days and compare them: per-model reports plus "
    "comparison.json and a self-contained comparison.html.")


def add_offline_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``recsys-dist offline-eval`` (and ``pipelines/offline_eval.py``)."""
    parser.add_argument("--root", required=True,
                        help="retraining root holding published/<date>/ (local or s3://)")
    parser.add_argument("--dates", required=True,
                        help="evaluation partitions, FROM..TO or one date (YYYY-MM-DD)")
    parser.add_argument("--models", help="comma-separated dates of the published models to "
                                         "evaluate (default: every published model)")
    parser.add_argument("--last", type=int, metavar="N",
                        help="only the N newest of those models (e.g. 7 for the last week's)")
    _add_data(parser, "data root overriding each model's data.path")
    parser.add_argument("--out", required=True, help="output directory (local or s3://)")
    parser.set_defaults(func=_cmd_offline_eval)


def _add_offline_eval(commands) -> None:
    offline_eval = commands.add_parser(
        "offline-eval", help="score published models on the same days and compare them",
        description=OFFLINE_EVAL_DESCRIPTION + " The oldest model is the reference. Exit "
                    "codes: 0 done, 2 arguments or publication, 3 data, 4 cluster lost. "
                    "Same as pipelines/offline_eval.py. See docs/scheduling.md.")
    add_offline_eval_arguments(offline_eval)


def _add_export(commands) -> None:
    export = commands.add_parser(
        "export", help="write a SavedModel that stock TensorFlow Serving serves",
        description="Writes a SavedModel whose serving_default signature takes the raw "
                    "Parquet columns (same names and types) and returns a probability per "
                    "label. Feature transforms run in-graph; sharded tables become plain "
                    "variables, so serving needs no parameter server. See docs/export.md.")
    _add_run_args(export, "export")
    export.add_argument("--out", required=True, help="output directory (must not exist or "
                                                     "be empty)")
    export.set_defaults(func=_cmd_export)


def _add_plan(commands) -> None:
    plan = commands.add_parser(
        "plan", help="the smallest cluster for a rate, memory per server, bytes per step",
        description="Plans a parameter-server cluster for a config: memory per server per "
                    "table, bytes per step to and from each server, the smallest cluster "
                    "(workers, servers) that trains --examples-per-second, and which "
                    "resource binds first (worker CPU, server CPU, server NIC, the chief's "
                    "dispatch). Rates per core are measured (docs/scaling.md); the flags "
                    "below override them.")
    _add_config_args(plan)
    plan.add_argument("--examples-per-second", required=True, help="target training rate")
    plan.add_argument("--nic-gbit", default="10", help="a server's network bandwidth, "
                                                       "Gbit/s each way (default 10)")
    plan.add_argument("--server-memory-gib", help="a server's memory for the model, GiB "
                                                  "(default: not checked)")
    plan.add_argument("--worker-cores", type=_positive, default=1,
                      help="cores of one worker task (default 1)")
    plan.add_argument("--server-cores", type=_positive, default=1,
                      help="cores of one parameter-server task (default 1)")
    plan.add_argument("--sample-batches", type=_positive, default=20,
                      help="training batches read to count distinct rows (default 20)")
    for flag, what in (("--worker-examples-per-core", "examples/s one worker core trains"),
                       ("--server-values-per-core", "float32 values/s one server core "
                                                    "serves"),
                       ("--chief-closures-per-second", "closures/s one chief dispatches")):
        plan.add_argument(flag, help=f"{what} (default: measured, docs/scaling.md)")
    plan.set_defaults(func=_cmd_plan)


def _add_server(commands) -> None:
    from recsys_dist.cluster.server import add_server_arguments

    server = commands.add_parser(
        "server", help="run one worker or parameter-server task (multi-machine clusters)",
        description="Runs a TensorFlow server task for cluster.mode: tf_config. Without "
                    "--job/--index/--cluster-spec it reads them from TF_CONFIG.")
    add_server_arguments(server)
    server.set_defaults(func=_cmd_server)


#: The commands of ``recsys-dist``, in the order ``--help`` lists them.
_COMMANDS = (_add_data_commands, _add_validate, _add_train, _add_evaluate, _add_retrain,
             _add_backfill, _add_offline_eval, _add_export, _add_plan, _add_server)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``recsys-dist``."""
    parser = argparse.ArgumentParser(
        prog="recsys-dist",
        description="Train sparse CTR / ranking models on TensorFlow parameter servers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(commands)
    add_output_arguments(parser)  # -q/-v before or after any command's name
    return parser


# ---- running --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None,
         parser: argparse.ArgumentParser | None = None) -> int:
    """Runs the command line; returns the exit code.

    Args:
      argv: Arguments without the program name; defaults to ``sys.argv[1:]``.
      parser: Parses ``argv`` instead of :func:`build_parser`'s (e.g. the parser of
        ``pipelines/offline_eval.py``); it must set ``func``, ``quiet`` and ``verbose``
        (:func:`~recsys_dist.console.add_output_arguments`).
    """
    args = (parser or build_parser()).parse_args(argv)
    configure_output(quiet=args.quiet, verbose=args.verbose)
    return reporting_errors(lambda: args.func(args))


def _restart_if_asked(code: int) -> None:
    """Starts this command again as a fresh process when :func:`restart_after` asked: the
    lost cluster's coordinator state cannot be reused."""
    if code == RESTART_EXIT and _restart_as is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ["RECSYS_DIST_RESTART"] = str(_restart_as)
        os.execv(sys.executable, [sys.executable, "-m", "recsys_dist.cli", *sys.argv[1:]])


def run() -> None:
    """Console-script entry point: :func:`main` under
    :func:`recsys_dist.console.run_command` (signals, ``error:`` lines, ``os._exit``),
    restarting the command after a lost parameter server (:func:`restart_after`)."""
    run_command(main, before_exit=_restart_if_asked)


if __name__ == "__main__":
    run()
