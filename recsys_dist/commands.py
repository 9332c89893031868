"""What each ``recsys-dist`` command does, one function per command taking the parsed
arguments and returning the exit code (the parser that declares the arguments is
``cli.py``). A command imports what it runs inside its function, so ``validate`` and
``--help`` start without TensorFlow. After a lost task, ``train``, ``retrain`` and
``backfill`` ask ``args.restart`` (``restart.py``) to start them again.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

from recsys_dist.errors import RecsysError


def synth(args: argparse.Namespace) -> int:
    from recsys_dist.data.synth import RowGenerator
    from recsys_dist.data.synth_behaviour import BehaviourGenerator
    from recsys_dist.data.synth_files import synthesize

    generator = {"criteo": RowGenerator, "behaviour": BehaviourGenerator}[args.dataset]
    try:
        report = synthesize(
            args.out,
            days=args.days,
            rows_per_day=args.rows_per_day,
            seed=args.seed,
            start_date=args.start_date,
            rows_per_file=args.rows_per_file,
            row_groups_per_file=args.row_groups_per_file,
            users=args.users or (200_000 if args.dataset == "criteo" else 100_000),
            generator_class=generator,
            hourly=args.hourly,
            drift=args.drift,
            history_length=args.history_length,
            progress=(lambda line: print(line, file=sys.stderr)) if not args.quiet else None,
        )
    except ValueError as exc:
        raise RecsysError(str(exc)) from None
    rates = f"click rate {report.click_rate:.3f}"
    if report.conversion_rate is not None:
        rates += f", conversion rate {report.conversion_rate:.4f}"
    print(
        f"wrote {report.rows:,} rows in {len(report.files)} files to {report.out_dir} "
        f"({report.days[0]}..{report.days[-1]}) in {report.seconds:.1f}s; {rates}"
    )
    return 0


def _scored(split: str | None) -> bool:
    """Whether ``split`` is read as evaluation reads it (its items and batches)."""
    return split in ("eval", "validation")


def _describe_plan(pipeline, steps_per_call: int, split: str | None) -> list[str]:
    plan = pipeline.plan
    if _scored(split):
        items = pipeline.scoring_items()
        how = "evaluation's items"
    else:
        items = pipeline.training_items(steps_per_call)
        how = "train.steps_per_call batches"
    lines = [
        f"data     {len(plan.files)} files, {pipeline.describe_rows()}, {len(plan.units)} units",
        f"schema   OK: {len(pipeline.transform.columns)} columns ("
        + ", ".join(
            f"{c} {pipeline.transform.column_dtypes[c]}" for c in pipeline.transform.columns[:6]
        )
        + ", ...)",
        f"plan     {len(items):,} work items of up to {max(i.rows for i in items):,} rows "
        f"({how}), handed to {plan.num_workers} workers as each is free",
    ]
    for s in plan.skipped:
        lines.append(f"skipped  {s.path}: {s.reason}" + (f" ({s.rows:,} rows)" if s.rows else ""))
    return lines


def validate(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config

    config = load_config(args.config, args.set).with_data_path(args.data)
    feats = config.features
    print(
        f"config   {config.file}: OK ({len(feats.features)} features, {len(feats.tables)} "
        f"tables, labels {', '.join(config.labels)}; model {config.model.name}; "
        f"feature config {feats.file})"
    )
    replicas, batch = config.cluster.workers, config.input.batch_size
    if config.cluster.strategy == "mirrored":
        print(
            f"strategy mirrored: {replicas} replicas in one process, each step's "
            f"{batch:,} rows split {batch // replicas:,} per replica"
        )
    elif config.cluster.strategy == "multi_worker_mirrored":
        print(
            f"strategy multi_worker_mirrored: {replicas} worker processes, each step's "
            f"{batch:,} rows split {batch // replicas:,} per worker"
        )
    carved = config.data.carved_note() if config.data is not None else None
    if carved:
        print(f"split    {carved}")
    if args.data is not None:
        splits = [None if args.split in (None, "all") else args.split]
    elif args.split not in (None, "all"):
        splits = [args.split]
    elif config.data is not None:
        splits = [
            s for s in ("train", "eval", "validation") if getattr(config.data, s) is not None
        ] or [None]
    else:
        print("data     not checked (no --data and no data section in the config)")
        return 0
    from recsys_dist.data.input_fn import prepare_input

    for split in splits:
        if split is not None:
            print(f"split    {split}")
        _check_split(config, prepare_input(config, split, config.cluster.workers), split, args.scan)
    return 0


def _check_split(config, pipeline, split: str | None, scan: bool) -> None:
    """``validate``'s lines of one split: its plan, then with ``--scan`` every value (the
    tables' distinct ids, the histories' lengths), else the tables' collisions on a
    sample of the training rows."""
    from recsys_dist.data.collisions import SAMPLE_ROWS, collision_warnings, table_ids
    from recsys_dist.data.history_lengths import history_lengths
    from recsys_dist.data.read_pass import read_pass_local

    for line in _describe_plan(pipeline, config.train.steps_per_call, split):
        print(line)
    if scan:
        result = read_pass_local(pipeline)
        print(
            f"scan     read {result.rows:,} rows in-graph in {result.seconds:.1f}s: "
            f"{result.skipped_rows:,} bad rows skipped"
        )
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
            print(
                f"tables   no hashed table shares rows often in the first "
                f"{SAMPLE_ROWS:,} rows (--scan counts every row)"
            )


def read(args: argparse.Namespace) -> int:
    from recsys_dist.cluster.read_check import read_split
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.config import load_config
    from recsys_dist.config.sections import ClusterSpec
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.progress import Progress

    config = load_config(args.config, args.set).with_data_path(args.data)
    # A read check runs on this machine: a tf_config job's cluster is read locally.
    mode = "in_process" if config.cluster.mode == "in_process" else "local"
    cluster = ClusterSpec(
        mode, args.workers or config.cluster.workers, args.ps or config.cluster.ps
    )
    pipeline = prepare_input(config, args.split, cluster.workers)
    for line in _describe_plan(pipeline, config.train.steps_per_call, args.split):
        print(line)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="recsys_dist_cluster_")
    with connect(cluster, log_dir, config.train.embedding_shard_bytes) as runtime:
        print(f"cluster  {runtime.describe()}")
        result = read_split(
            pipeline,
            runtime.coordinator,
            runtime.num_workers,
            config.train.steps_per_call,
            scoring=_scored(args.split),
            collect_rows=args.check,
            progress=Progress("rows"),
        )
    print(
        f"read     {result.rows:,} rows in {result.seconds:.1f}s "
        f"({result.rows_per_second:,.0f} rows/s); per worker "
        + " / ".join(f"{r:,}" for r in result.rows_per_worker)
        + f"; {result.skipped_rows:,} bad rows skipped"
    )
    if args.check:
        from recsys_dist.data.read_pass import check_exactly_once

        check_exactly_once(pipeline.plan, result.row_ids, pipeline.hash_share)
        print(f"check    every planned row was read exactly once ({len(result.row_ids):,} rows)")
    return 0


def _start_servers_early(config) -> None:
    """A local cluster's servers start importing TensorFlow beside this command's import."""
    if config.cluster.mode == "local" and config.cluster.strategy == "parameter_server":
        from recsys_dist.cluster.local import start_forks_early

        start_forks_early()


def train(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config

    config = load_config(args.config, args.set).with_data_path(args.data)
    _start_servers_early(config)
    from recsys_dist.errors import ClusterLost
    from recsys_dist.train.refit import refits, train_choosing_passes
    from recsys_dist.train.run import train_run

    model_dir = args.model_dir or os.path.join(
        "runs", os.path.splitext(os.path.basename(config.file))[0]
    )
    warm = None
    if args.warm_start:
        from recsys_dist.checkpoint.store import checkpoint_at

        warm = checkpoint_at(args.warm_start, "--warm-start")
    resize = config.retrain.on_table_resize if config.retrain is not None else "fail"
    try:
        (train_choosing_passes if refits(config) else train_run)(
            config,
            model_dir,
            evaluate=not args.no_eval,
            warm_start_from=warm,
            on_table_resize=resize,
            restart_now=args.restart.immediate(config.train.max_restarts),
        )
    except ClusterLost as exc:
        return args.restart.after_lost(exc, config.train.max_restarts)
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config

    dates = {"data.eval": {"dates": args.dates}} if args.dates is not None else None
    config = load_config(
        args.config or run_config(args.model_dir), args.set, dates, source="--dates"
    ).with_data_path(args.data)
    _start_servers_early(config)
    from recsys_dist.evaluation.job import run_evaluation
    from recsys_dist.progress import Progress

    result = run_evaluation(
        config,
        args.model_dir,
        args.out,
        checkpoint=args.checkpoint,
        baseline=args.baseline,
        progress=None if args.quiet else Progress("scored rows"),
    )
    metrics = result.metrics
    print(
        f"evaluated {metrics['rows']:,} rows of checkpoint {metrics['checkpoint']} "
        f"(step {metrics['step']:,}) at {result.rows_per_second:,.0f} rows/s"
    )

    def f(value, digits: int = 4) -> str:  # a metric is null when one class is absent
        return "n/a" if value is None else f"{value:.{digits}f}"

    for label, m in metrics["labels"].items():
        line = (
            f"  {label}: AUC {f(m['auc'])}, logloss {f(m['logloss'])}, NE "
            f"{f(m['normalized_entropy'])}, calibration {f(m['calibration']['ratio'], 3)}"
        )
        if "gauc" in m:
            g = m["gauc"]
            line += (
                f", GAUC {f(g['gauc'])} ({g['groups']:,} groups; "
                f"{g['skipped_groups']:,} single-class groups skipped)"
            )
        if "oracle" in m:
            line += f" | oracle AUC {f(m['oracle']['auc'])}, logloss {f(m['oracle']['logloss'])}"
        print(line)
        delta = metrics.get("comparison", {}).get("labels", {}).get(label)
        if delta:
            boot = delta.get("bootstrap")
            print(
                f"  vs baseline: AUC {delta['delta']['auc']:+.4f}"
                + (f" (95% CI {boot['low']:+.4f}..{boot['high']:+.4f})" if boot else "")
                + f", logloss {delta['delta']['logloss']:+.4f}"
            )
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
            raise ConfigError(
                path,
                "",
                "not found, and no --config was given; it is written "
                "when train starts: pass --config, or check "
                "--model-dir",
            )
        if not storage_io.is_remote(model_dir):
            return path
        local = tempfile.mkdtemp(prefix="recsys_dist_config_")
        for name in (CONFIG_FILE, FEATURES_FILE):
            with open(os.path.join(local, name), "w", encoding="utf-8") as handle:
                handle.write(storage_io.read_text(storage_io.join(model_dir, name)))
    return os.path.join(local, CONFIG_FILE)


def export(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.export import export_model

    if args.base or args.deltas:
        return _export_chain(args)
    if args.model_dir is None:
        raise RecsysError("export needs --model-dir (a run), or --base (a published chain)")
    config = load_config(args.config or run_config(args.model_dir), args.set)
    result = export_model(config, args.model_dir, args.out, checkpoint=args.checkpoint)
    inputs = ", ".join(f"{c}:{d}" for c, d in result.inputs.items())
    lists = [c for c, d in result.inputs.items() if d.startswith("list<")]
    print(
        f"exported step {result.step:,} of {result.checkpoint} to {result.out_dir}\n"
        f"  serving_default inputs ({len(result.inputs)} columns): {inputs}\n"
        + (
            f"  list columns are padded [N, L] inputs plus <column>_lengths: {', '.join(lists)}\n"
            if lists
            else ""
        )
        + "  serving_nullable: the same plus <column>_valid per scalar column\n"
        f"  outputs: {', '.join(result.outputs)} (probabilities)"
    )
    return 0


def _export_chain(args: argparse.Namespace) -> int:
    from recsys_dist.retrain.delta_chain import export_chain

    if args.model_dir or args.checkpoint:
        raise RecsysError("export takes --model-dir or --base, not both")
    if not args.base:
        raise RecsysError("--deltas needs --base, the base version they apply to")
    version = export_chain(args.base, args.deltas, args.out)
    print(f"exported version {version} (a base and its deltas) to {args.out}")
    return 0


def follow(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.errors import ClusterLost
    from recsys_dist.retrain.follow import follow as follow_partitions

    def max_restarts() -> int:
        return load_config(args.config, args.set).train.max_restarts

    try:
        restart_now = args.restart.immediate(max_restarts())
        outcome = follow_partitions(args.config, args.set, args.data, args.until_idle, restart_now)
    except ClusterLost as exc:
        return args.restart.after_lost(exc, max_restarts())
    count = len(outcome.trained)
    print(
        f"follow trained {count} partition{'' if count == 1 else 's'}, published "
        f"{', '.join(outcome.published) or 'nothing'}"
    )
    return 0


def retrain(args: argparse.Namespace) -> int:
    from recsys_dist.config import load_config
    from recsys_dist.errors import ClusterLost
    from recsys_dist.retrain.daily import backfill, retrain_day

    def max_restarts() -> int:
        return load_config(args.config, args.set).train.max_restarts

    try:
        restart_now = args.restart.immediate(max_restarts())
        if args.command == "retrain":
            day = retrain_day(args.config, args.set, args.date, args.data, True, restart_now)
            return day.exit_code
        outcomes = backfill(args.config, args.set, args.first, args.last, args.data, restart_now)
    except ClusterLost as exc:
        return args.restart.after_lost(exc, max_restarts())
    print("backfill " + ", ".join(f"{o.date} {o.status}" for o in outcomes))
    return 0


def offline_eval(args: argparse.Namespace) -> int:
    from recsys_dist.evaluation.comparison_report import comparison_text
    from recsys_dist.retrain.offline_eval import evaluate_published

    models = [m for m in args.models.split(",") if m.strip()] if args.models else None
    comparison = evaluate_published(
        args.root,
        args.dates,
        args.out,
        models=models,
        data_path=args.data,
        last=args.last,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
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


def plan(args: argparse.Namespace) -> int:
    from recsys_dist.cluster import capacity
    from recsys_dist.config import load_config

    target = _positive_flag(args, "--examples-per-second", "examples per second to train")
    nic = _positive_flag(args, "--nic-gbit", "a server's network bandwidth in Gbit/s")
    memory = _positive_flag(args, "--server-memory-gib", "a server's memory in GiB")
    measured = capacity.MEASURED_RATES
    step_ms = _positive_flag(args, "--server-step-ms", "CPU ms a server spends per step")
    rates = capacity.Rates(
        *(
            _positive_flag(args, flag, what) or default
            for flag, what, default in (
                ("--worker-examples-per-core", "examples/s", measured.worker_examples_per_core),
                ("--server-values-per-core", "values/s", measured.server_values_per_core),
                ("--chief-closures-per-second", "closures/s", measured.chief_closures),
            )
        ),
        server_step_seconds=step_ms / 1e3 if step_ms else measured.server_step_seconds,
    )
    machines = capacity.Machines(
        nic * 1e9 / 8, memory * 2**30 if memory else None, args.worker_cores, args.server_cores
    )
    config = load_config(args.config, args.set).with_data_path(args.data)
    from recsys_dist.models.footprint import model_footprint

    footprint = model_footprint(config)
    distinct, source = _plan_rows(args, config)
    print(
        f"model    {config.model.name}, batch {config.input.batch_size:,}, "
        f"{config.train.steps_per_call} steps per call; {len(footprint.stacks)} stacked "
        f"table weight(s), {len(footprint.dynamic)} dynamic table(s), "
        f"{footprint.dense_parameters:,} dense parameters in {len(footprint.dense)} variables"
    )
    print(
        f"rows     distinct rows per batch: {source}"
        if distinct is not None
        else f"rows     distinct rows per batch: ids spread evenly (an upper bound); {source}"
    )
    print(
        f"rates    {rates.worker_examples_per_core:,.0f} examples/s per worker core, "
        f"{rates.server_values_per_core:,.0f} values/s and "
        f"{rates.server_step_seconds * 1e3:.2f} ms per step per server core, "
        f"{rates.chief_closures:,.0f} closures/s per chief; NIC {nic:g} Gbit/s per server"
        + (f", {memory:g} GiB per server" if memory else ", server memory not checked")
    )
    result = capacity.plan(footprint, config, target, rates, machines, distinct)
    for line in capacity.plan_lines(result, config):
        print(line)
    return 0


def server(args: argparse.Namespace) -> int:
    from recsys_dist.cluster import server

    return server.run_task(args)
