"""``recsys-dist follow``: one long-running run that trains each partition as it lands.

With ``follow:`` in the config, :func:`follow` lists the complete partitions under
``data.path`` (``data/partitions.py``), trains each one not trained yet, oldest first,
into ``ROOT/runs/<partition>/`` starting from the run of the partition trained before it
(weights, optimizer state, dynamic tables), records it in ``ROOT/trained.json``, and
every ``publish_every`` partitions publishes a delta of the rows that changed, or a full
base every ``base_every`` deltas (``retrain/delta_chain.py``). Then it waits for the next.

A run killed at any moment resumes: a partition run cut short resumes from its own
checkpoint (its data position), one finished but not recorded is recorded, and a
publication cut short is replaced. See docs/follow.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import posixpath
import shutil
import time

from recsys_dist import storage_io
from recsys_dist.checkpoint.store import find_checkpoint
from recsys_dist.cluster.liveness import ImmediateRestart
from recsys_dist.config import load_config
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.data.partitions import Partition, complete_partitions
from recsys_dist.errors import ConfigError, RecsysError
from recsys_dist.export import delta
from recsys_dist.retrain.delta_chain import PUBLISHED, Chain, version_name
from recsys_dist.retrain.publish import export_apart
from recsys_dist.train.run import train_run

LEDGER = "trained.json"
#: Runs before the kept ones that a prune looks at (those a crash may have left).
PRUNE_LOOKBACK = 8

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


@dataclasses.dataclass(frozen=True)
class FollowOutcome:
    """What a follow run did before it stopped: partitions trained and versions published."""

    trained: list[str]
    published: list[str]


class Ledger:
    """``ROOT/trained.json``: the partitions trained, in the order they were trained."""

    def __init__(self, root: str):
        self.path = posixpath.join(root, LEDGER)
        self.entries: list[dict] = []
        if storage_io.exists(self.path):
            try:
                self.entries = json.loads(storage_io.read_text(self.path))["partitions"]
            except (ValueError, KeyError, TypeError) as exc:
                raise RecsysError(
                    f"{self.path}: not a ledger of trained partitions ({exc}); it is "
                    "written by recsys-dist follow only"
                ) from None

    def names(self) -> dict[str, dict]:
        return {entry["partition"]: entry for entry in self.entries}

    def record(self, entry: dict) -> None:
        self.entries.append(entry)
        storage_io.write_text(self.path, json.dumps({"partitions": self.entries}, indent=1))


def check_follow_config(config: ExperimentConfig) -> ExperimentConfig:
    """Raises ConfigError for a config ``follow`` cannot run."""
    if config.follow is None:
        raise ConfigError(
            config.file,
            "follow",
            "missing; add follow: {root: DIR} (and optionally partition, marker, "
            "poll_seconds, publish_every, base_every) to follow the data as it lands",
        )
    if config.data is None:
        raise ConfigError(
            config.file, "data", "missing; follow needs data.path, the root of the partitions"
        )
    if config.train.early_stopping is not None:
        raise ConfigError(
            config.file,
            "train.early_stopping",
            "follow trains each partition train.epochs passes and does not stop early; "
            "remove it, or --set train.early_stopping=null",
        )
    return config


class _Follower:
    """The state of one follow run (see :func:`follow`)."""

    def __init__(self, config_path, overrides, data_path, restart_now):
        self.config_path, self.overrides = config_path, overrides
        self.base = check_follow_config(load_config(config_path, overrides))
        self.spec = self.base.follow
        self.data_root = data_path or self.base.data.path
        self.restart_now = restart_now
        self.ledger = Ledger(self.spec.root)
        self.chain = Chain(posixpath.join(self.spec.root, PUBLISHED))
        self.tensors: dict | None = None  # those of the newest publication, once read
        self.warned: set[tuple[str, str]] = set()
        self.outcome = FollowOutcome([], [])

    def run_dir(self, partition: Partition) -> str:
        return posixpath.join(self.spec.root, "runs", partition.run_name)

    def scan(self) -> tuple[list[Partition], list[str]]:
        return complete_partitions(
            self.data_root,
            self.base.data.partition_key,
            self.spec.partition == "hour",
            self.spec.marker,
        )

    def todo(self, complete: list[Partition]) -> list[Partition]:
        """The complete partitions not trained yet; warns once about a trained one whose
        files changed since."""
        done = self.ledger.names()
        for partition in complete:
            entry = done.get(partition.name)
            key = (partition.name, partition.fingerprint)
            if entry and entry["fingerprint"] != partition.fingerprint and key not in self.warned:
                self.warned.add(key)
                log.warning(
                    f"{partition.name}: its files changed after it was trained "
                    f"(now {len(partition.files)} files, {sum(partition.sizes):,} bytes); "
                    "it is not trained again"
                )
        return [p for p in complete if p.name not in done]

    def train(self, partition: Partition) -> None:
        """Trains ``partition`` (or resumes its run) and records it in the ledger."""
        started = _now()
        newest = max((e["start"] for e in self.ledger.entries), default=None)
        late = newest is not None and partition.start.isoformat() < newest
        log.info(
            f"follow\ttraining {partition.name}"
            + (f" (late: {newest} was trained before it)" if late else "")
            + f": {len(partition.files)} files, {sum(partition.sizes):,} bytes, "
            f"marked {_seconds(started - partition.marked_at)} ago"
        )
        values = {
            "data.path": self.data_root,
            "data.train": {"glob": partition.name},
            "data.validation": None,
            "data.eval": None,
        }
        config = load_config(
            self.config_path, self.overrides, values, source=f"follow {partition.name}"
        )
        # Dynamic tables stamp and evict by the partition's date, not the clock's.
        train = dataclasses.replace(config.data.train, start=partition.start)
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, train=train))
        parent = self.ledger.entries[-1] if self.ledger.entries else None
        run_dir = self.run_dir(partition)
        result = train_run(
            config,
            run_dir,
            evaluate=False,
            warm_start_from=find_checkpoint(parent["run"], parent["checkpoint"])
            if parent
            else None,
            restart_now=self.restart_now,
            check_tables=not self.outcome.trained,
        )
        saved = find_checkpoint(run_dir)
        trained = _now()
        self.ledger.record(
            {
                "partition": partition.name,
                "start": partition.start.isoformat(),
                "fingerprint": partition.fingerprint,
                "run": run_dir,
                "checkpoint": saved.directory,
                "step": saved.step,
                "marked_at": partition.marked_at.isoformat(timespec="seconds"),
                "trained_at": trained.isoformat(timespec="seconds"),
                "late": late,
            }
        )
        self.outcome.trained.append(partition.name)
        log.info(
            f"follow\ttrained {partition.name} in {_seconds(trained - started)} "
            f"(step {result.step:,}); {_seconds(trained - partition.marked_at)} after its marker"
        )

    def publish_due(self) -> list[dict]:
        """The ledger entries no publication holds, if there are ``publish_every``."""
        covered = self.chain.covered()
        pending = [e for e in self.ledger.entries if e["partition"] not in covered]
        return pending if len(pending) >= self.spec.publish_every else []

    def publish(self, pending: list[dict]) -> None:
        """Exports the newest checkpoint and publishes it as a delta or a base."""
        newest = pending[-1]
        scratch = storage_io.local_scratch("recsys_dist_follow_export_")
        try:
            started = time.perf_counter()
            export_dir = os.path.join(scratch, "export")
            export_apart(newest["run"], export_dir, newest["checkpoint"])
            manifests = self.chain.manifests()
            since_base = _deltas_since_base(manifests)
            previous = None
            if manifests and since_base < self.spec.base_every:
                previous = self._previous_tensors(manifests, scratch)
            manifest = self.chain.publish(
                export_dir,
                previous,
                {
                    "partitions": [e["partition"] for e in pending],
                    "through": newest["partition"],
                    "checkpoint": newest["checkpoint"],
                    "step": newest["step"],
                },
            )
            self.tensors = delta.export_tensors(export_dir)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        name = version_name(manifest["version"])
        self.outcome.published.append(name)
        marked = datetime.datetime.fromisoformat(newest["marked_at"])
        log.info(
            f"publish\t{manifest['kind']} {name} through {newest['partition']}: "
            f"{manifest['bytes']:,} bytes ({manifest['bytes'] / manifest['full_bytes']:.1%} "
            f"of a full export) in {time.perf_counter() - started:.1f}s; "
            f"{_seconds(_now() - marked)} after the marker of {newest['partition']}"
        )

    def _previous_tensors(self, manifests: list[dict], scratch: str) -> dict:
        """The tensors of the newest publication: kept from the last one this process
        made, else its base with its deltas applied."""
        if self.tensors is not None:
            return self.tensors
        base, deltas = self.chain.links(manifests)
        base_dir = self.chain.local_copy(base, scratch)
        return delta.chain_tensors(base_dir, [self.chain.local_copy(m, scratch) for m in deltas])

    def prune(self) -> None:
        """Removes the partition runs before the newest ``keep_runs`` (a run warm-starts
        from the newest, and a publication exports the newest); looks at the few before
        them only, so a long ledger costs nothing."""
        older = self.ledger.entries[: -self.spec.keep_runs]
        for entry in older[-PRUNE_LOOKBACK:]:
            if storage_io.exists(entry["run"]):
                storage_io.rmtree(entry["run"])


def _deltas_since_base(manifests: list[dict]) -> int:
    count = 0
    for manifest in reversed(manifests):
        if manifest["kind"] == "base":
            return count
        count += 1
    return count


def _seconds(delta_time: datetime.timedelta) -> str:
    return f"{max(delta_time.total_seconds(), 0.0):.0f}s"


def follow(
    config_path: str,
    overrides: list[str],
    data_path: str | None = None,
    until_idle: float | None = None,
    restart_now: ImmediateRestart | None = None,
) -> FollowOutcome:
    """Trains every complete partition as it lands and publishes deltas, until stopped
    (a signal) or, with ``until_idle``, until no partition has landed for that many
    seconds. ``restart_now`` is :func:`train_run`'s.

    Raises:
      ConfigError: no ``follow`` section, or one it cannot run.
      DataError: the data root is missing, or a complete partition holds no file.
      ClusterLost: a parameter server was lost (rerun to resume).
    """
    follower = _Follower(config_path, overrides, data_path, restart_now)
    idle_since, waiting_said = time.monotonic(), False
    while True:
        due = follower.publish_due()
        if due:
            follower.publish(due)
        complete, pending = follower.scan()
        todo = follower.todo(complete)
        if todo:
            follower.train(todo[0])
            follower.prune()
            idle_since, waiting_said = time.monotonic(), False
            continue
        if not waiting_said:
            _say_waiting(follower, complete, pending)
            waiting_said = True
        if until_idle is not None and time.monotonic() - idle_since >= until_idle:
            log.info(f"follow\tno partition landed for {until_idle:g}s; stopping")
            return follower.outcome
        time.sleep(follower.spec.poll_seconds)


def _say_waiting(follower: _Follower, complete: list[Partition], pending: list[str]) -> None:
    newest = complete[-1].name if complete else "none"
    trained = follower.ledger.entries[-1]["partition"] if follower.ledger.entries else "none"
    log.info(
        f"follow\twaiting for partitions under {follower.data_root}: newest complete "
        f"{newest}, newest trained {trained}"
        + (f", {len(pending)} without {follower.spec.marker} yet" if pending else "")
    )
