"""The ``recsys-dist`` command line.

Commands:
  data synth   Write synthetic Criteo-like Parquet data with an oracle logit.
  validate     Check a config, then the data's schema (and, with --scan, every value).
  data read    Read one pass of a split on a local cluster through the worker input path.
  train        Train a model on a parameter-server cluster, then evaluate it held out.
  server       Run one worker or parameter-server task of a multi-machine cluster.

Errors caused by input (configs, data, arguments) print ``error: <message>`` and exit
non-zero (2 for configs and arguments, 3 for data); they never print a traceback.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import signal
import sys
import tempfile
import time
from typing import Callable, Sequence

import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
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
    from recsys_dist.data.synth import synthesize

    try:
        report = synthesize(args.out, days=args.days, rows_per_day=args.rows_per_day,
                            seed=args.seed, start_date=args.start_date,
                            rows_per_file=args.rows_per_file,
                            row_groups_per_file=args.row_groups_per_file,
                            progress=(lambda line: print(line, file=sys.stderr))
                            if not args.quiet else None)
    except ValueError as exc:
        raise RecsysError(str(exc)) from None
    print(f"wrote {report.rows:,} rows in {len(report.files)} files to {report.out_dir} "
          f"({report.days[0]}..{report.days[-1]}) in {report.seconds:.1f}s; "
          f"click rate {report.click_rate:.3f}, conversion rate {report.conversion_rate:.4f}")
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

    config = load_config(args.config, args.set)
    feats = config.features
    print(f"config   {config.file}: OK ({len(feats.features)} features, {len(feats.tables)} "
          f"tables, labels {', '.join(config.labels)}; model {config.model.name}; "
          f"feature config {feats.file})")
    if args.data is not None:
        splits = [None if args.split in (None, "all") else args.split]
    elif args.split not in (None, "all"):
        splits = [args.split]
    elif config.data is not None:
        splits = [s for s in ("train", "eval") if getattr(config.data, s) is not None] or [None]
    else:
        print("data     not checked (no --data and no data section in the config)")
        return 0
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.data.read_pass import read_pass_local

    for split in splits:
        if split is not None:
            print(f"split    {split}")
        pipeline = prepare_input(config, split, config.cluster.workers, data_path=args.data)
        for line in _describe_plan(pipeline):
            print(line)
        if args.scan:
            result = read_pass_local(pipeline.single_worker())
            print(f"scan     read {result.rows:,} rows in-graph in {result.seconds:.1f}s: "
                  f"{result.skipped_rows:,} bad rows skipped")
    return 0


def _cmd_read(args: argparse.Namespace) -> int:
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.config import load_config
    from recsys_dist.config.experiment import ClusterSpec
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.data.read_pass import read_pass_on_cluster
    from recsys_dist.progress import Progress

    config = load_config(args.config, args.set)
    # A read check runs on this machine: a tf_config job's cluster is read locally.
    mode = "in_process" if config.cluster.mode == "in_process" else "local"
    cluster = ClusterSpec(mode, args.workers or config.cluster.workers,
                          args.ps or config.cluster.ps)
    pipeline = prepare_input(config, args.split, cluster.workers, data_path=args.data)
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

    config = load_config(args.config, args.set)
    model_dir = args.model_dir or os.path.join(
        "runs", os.path.splitext(os.path.basename(config.file))[0])
    try:
        train_run(config, model_dir, data_path=args.data, evaluate=not args.no_eval)
    except ClusterLost as exc:
        return restart_after(exc, config)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.evaluation.job import run_evaluation
    from recsys_dist.progress import Progress

    dates = {"data.eval": {"dates": args.dates}} if args.dates is not None else None
    config = load_config(args.config or run_config(args.model_dir), args.set, dates,
                         source="--dates")
    result = run_evaluation(config, args.model_dir, args.out, checkpoint=args.checkpoint,
                            data_path=args.data, baseline=args.baseline,
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


def _cmd_server(args: argparse.Namespace) -> int:
    from recsys_dist.cluster import server

    argv = []
    if args.job is not None:
        argv += ["--job", args.job]
    if args.index is not None:
        argv += ["--index", str(args.index)]
    if args.cluster_spec is not None:
        argv += ["--cluster-spec", args.cluster_spec]
    if args.inter_op_threads is not None:
        argv += ["--inter-op-threads", str(args.inter_op_threads)]
    if args.intra_op_threads is not None:
        argv += ["--intra-op-threads", str(args.intra_op_threads)]
    return server.main(argv)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``recsys-dist``."""
    parser = argparse.ArgumentParser(
        prog="recsys-dist",
        description="Train sparse CTR / ranking models on TensorFlow parameter servers.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="keep TensorFlow's own Python log messages (hidden by default: "
                             "errors are reported as one clear line)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    data = commands.add_parser("data", help="make or read data")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    synth = data_commands.add_parser(
        "synth", help="write synthetic Criteo-like Parquet data with an oracle logit",
        description="Write OUT/dt=YYYY-MM-DD/part-NNNNN.parquet for N days. Labels come "
                    "from a known logistic model; each row stores its true logit in "
                    "oracle_logit. Matching feature config: features/criteo_synth.yaml.")
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
    synth.add_argument("--quiet", action="store_true", help="no per-file progress lines")
    synth.set_defaults(func=_cmd_synth)

    def add_config_and_set(sub: argparse.ArgumentParser, of_the_run: bool = False) -> None:
        if of_the_run:
            sub.add_argument("--config", help="model/training config YAML (default: the "
                                              "run's own, MODEL_DIR/config.yaml)")
        else:
            sub.add_argument("--config", required=True, help="model/training config YAML")
        sub.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key, e.g. --set input.batch_size=1024")

    def add_config_args(sub: argparse.ArgumentParser) -> None:
        add_config_and_set(sub)
        sub.add_argument("--data", help="data path overriding data.path: a root of dt= "
                         "partitions, a directory, a Parquet file or a glob; local or s3://")

    read = data_commands.add_parser(
        "read", help="read one pass of a split on a local cluster through the worker input path")
    add_config_args(read)
    read.add_argument("--split", choices=["train", "eval"], default="train",
                      help="which split of data: to read (default train)")
    read.add_argument("--workers", type=_positive, help="workers (default cluster.workers)")
    read.add_argument("--ps", type=_positive, help="parameter servers (default cluster.ps)")
    read.add_argument("--log-dir", help="directory for the server logs (default: a temp dir)")
    read.add_argument("--check", action="store_true",
                      help="collect every row id and check each planned row was read exactly once")
    read.set_defaults(func=_cmd_read)

    validate = commands.add_parser(
        "validate", help="check a config, then the data's schema against it",
        description="Checks the config and the feature config it names. With --data (or the "
                    "config's data section and --split), reads every Parquet footer and checks "
                    "columns, types, null labels and bad files. --scan also reads every row "
                    "through the in-graph input function and checks its values.")
    add_config_args(validate)
    validate.add_argument("--split", choices=["train", "eval", "all"], default=None,
                          help="with --data: apply this split's dates under the path (default: "
                               "all files under it); without --data: check this split of "
                               "data.path (default: every configured split)")
    validate.add_argument("--scan", action="store_true",
                          help="also read every row in-graph and check its values")
    validate.set_defaults(func=_cmd_validate)

    train = commands.add_parser(
        "train", help="train a model on a parameter-server cluster, then evaluate it",
        description="Trains config.model on the training split with embeddings sharded over "
                    "the parameter servers and asynchronous steps scheduled on the workers, "
                    "then evaluates on data.eval (AUC and logloss next to the oracle's when "
                    "the data has oracle logits). Writes TensorBoard summaries, the resolved "
                    "config and train_result.json to --model-dir.")
    add_config_args(train)
    train.add_argument("--model-dir", help="output directory (default runs/<config name>)")
    train.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    train.set_defaults(func=_cmd_train)

    evaluate = commands.add_parser(
        "evaluate", help="score a checkpoint on a split and write metrics and an HTML report",
        description="Scores every row of the evaluation data once with a checkpoint "
                    "(training=False) on the config's cluster, and writes metrics.json, "
                    "predictions.parquet and a self-contained report.html to --out: AUC, "
                    "GAUC, logloss, normalised entropy, calibration, slices and the oracle's "
                    "AUC/logloss when the data has its logit. See docs/evaluation.md.")
    add_config_and_set(evaluate, of_the_run=True)
    evaluate.add_argument("--model-dir", required=True, help="the run to evaluate")
    evaluate.add_argument("--checkpoint", help="a checkpoint directory (default: the newest "
                                               "complete one of --model-dir)")
    where = evaluate.add_mutually_exclusive_group()
    where.add_argument("--data", help="evaluation data: a root with date partitions (the "
                                      "config's data.eval dates apply), a directory, a file "
                                      "or a glob")
    where.add_argument("--dates", help="FROM..TO (or one date) of partitions under data.path "
                                       "(default: the config's data.eval)")
    evaluate.add_argument("--out", required=True, help="output directory (local)")
    evaluate.add_argument("--baseline", help="compare against: another run's model dir, or a "
                                             "metrics.json written by evaluate")
    evaluate.add_argument("--quiet", action="store_true", help="no progress lines")
    evaluate.set_defaults(func=_cmd_evaluate)

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
    add_config_and_set(retrain)
    retrain.add_argument("--date", required=True, type=_date, help="run date, YYYY-MM-DD")
    retrain.add_argument("--data", help="override data.path (the root of date partitions)")
    retrain.set_defaults(func=_cmd_retrain)

    backfill = commands.add_parser(
        "backfill", help="run retrain for every date of a range, in order",
        description="Runs recsys-dist retrain for each date from --from to --to, oldest "
                    "first; published or gated days are skipped quickly on a rerun.")
    add_config_and_set(backfill)
    backfill.add_argument("--from", dest="first", required=True, type=_date,
                          help="first date, YYYY-MM-DD")
    backfill.add_argument("--to", dest="last", required=True, type=_date,
                          help="last date, YYYY-MM-DD")
    backfill.add_argument("--data", help="override data.path (the root of date partitions)")
    backfill.set_defaults(func=_cmd_retrain)

    export = commands.add_parser(
        "export", help="write a SavedModel that stock TensorFlow Serving serves",
        description="Writes a SavedModel whose serving_default signature takes the raw "
                    "Parquet columns (same names and types) and returns a probability per "
                    "label. Feature transforms run in-graph; sharded tables become plain "
                    "variables, so serving needs no parameter server. See docs/export.md.")
    add_config_and_set(export, of_the_run=True)
    export.add_argument("--model-dir", required=True, help="the run to export")
    export.add_argument("--checkpoint", help="a checkpoint directory (default: the newest "
                                             "complete one of --model-dir)")
    export.add_argument("--out", required=True, help="output directory (must not exist or "
                                                     "be empty)")
    export.set_defaults(func=_cmd_export)

    server = commands.add_parser(
        "server", help="run one worker or parameter-server task (multi-machine clusters)",
        description="Runs a TensorFlow server task for cluster.mode: tf_config. Without "
                    "--job/--index/--cluster-spec it reads them from TF_CONFIG.")
    server.add_argument("--job", choices=["worker", "ps"], help="task type")
    server.add_argument("--index", type=int, help="task index")
    server.add_argument("--cluster-spec", help='JSON, e.g. {"worker": ["h1:2222"], '
                                               '"ps": ["h2:2222"]}')
    server.add_argument("--inter-op-threads", type=int,
                        help="inter-op threads (default: workers + 2)")
    server.add_argument("--intra-op-threads", type=int,
                        help="threads per op (default: TensorFlow's, one per core; set it "
                             "when several tasks share a machine)")
    server.set_defaults(func=_cmd_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        # e.g. ClusterCoordinator logs every failed closure with its graph stack; the
        # command reports the cause itself.
        logging.getLogger("tensorflow").setLevel(logging.CRITICAL)
    return reporting_errors(lambda: args.func(args))


def reporting_errors(action: Callable[[], int]) -> int:
    """Runs ``action``; a :class:`RecsysError` becomes ``error: <message>`` on stderr and
    its exit code (never a traceback), Ctrl-C exit code 130."""
    try:
        return action()
    except RecsysError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def exit_now(code: int) -> None:
    """Flushes and exits through ``os._exit`` (see :func:`run`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run() -> None:
    """Console-script entry point.

    Exits through ``os._exit`` after flushing, also on ``SystemExit`` (SIGTERM and
    SIGHUP raise it, see ``cluster/local.py``; so does argparse): after its servers are
    gone, a ``ClusterCoordinator`` hangs in its destructor at interpreter exit (its
    failure handler holds a lock while it waits for the lost workers to come back), so a
    SIGTERM mid-training never ended the process. (Arrow's S3 client, used by the
    Parquet op, is finalized by an exit handler the op registers; ``os._exit`` skips
    exit handlers, which is safe for a process about to end.)
    """
    from recsys_dist.cluster.local import terminate_on_signals, termination_signal
    from recsys_dist.tf_log_filter import filter_stderr_for_life

    filter_stderr_for_life()  # TF_CPP_MIN_LOG_LEVEL for TensorFlow's Abseil lines too
    try:
        with terminate_on_signals():  # SIGTERM, SIGHUP and SIGINT at any moment
            code = main()
    except SystemExit as exc:
        signum = termination_signal()
        if signum is not None and exc.code == 128 + signum:
            print(f"error: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        elif isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001  re-raised unless a signal caused it
        signum = termination_signal()
        if signum is None:
            raise
        # The signal's SystemExit surfaced from TensorFlow's C code as another error;
        # the signal is what happened, and the cleanup on the way out has run.
        print(f"error: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        code = 128 + signum
    if code == RESTART_EXIT and _restart_as is not None:
        # A fresh process: the lost cluster's coordinator state cannot be reused.
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ["RECSYS_DIST_RESTART"] = str(_restart_as)
        os.execv(sys.executable, [sys.executable, "-m", "recsys_dist.cli", *sys.argv[1:]])
    exit_now(code)


if __name__ == "__main__":
    run()
