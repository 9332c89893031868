"""The capacity planner: memory per server, bytes per step and the smallest cluster for a rate.

From a model's footprint (:mod:`recsys_dist.models.footprint`) and the config's
optimizers, batch and ``steps_per_call``, it works out without TensorFlow where each
variable lives (as :mod:`recsys_dist.cluster.runtime` places it), what one step moves
between a worker and each server (distinct rows from :mod:`recsys_dist.data.batch_rows`
or, without data, an upper bound for evenly spread ids), and which resource bounds the
examples per second: worker CPU, server CPU, server NIC or the chief's dispatch. The
per-core rates are :data:`MEASURED_RATES`; the command's flags override them. See
docs/scaling.md#how-it-works.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping

from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.config.memory import VALUE_BYTES, table_bytes
from recsys_dist.models.footprint import ModelFootprint, TableUse

#: Bytes of one int64 id (a float32 value's are :data:`VALUE_BYTES`).
ID_BYTES = 8
#: Bytes per row of a dynamic table beside its vector and slots: the id index entry (a
#: ``MutableHashTable`` int64 -> int64, estimated at 32 bytes with its hashing overhead)
#: and the int64 last-seen day.
DYNAMIC_ROW_BYTES = 32 + 8
#: The resources that bound a cluster's examples per second, in the order they are printed.
RESOURCES = ("worker CPU", "server CPU", "server NIC", "chief dispatch")
#: Closures the chief runs each second besides the training closures: the training AUC,
#: read by a closure on a worker once a second (``train/auc_reading.py``).
CHIEF_OTHER_CLOSURES_PER_SECOND = 1.0


@dataclasses.dataclass(frozen=True)
class Rates:
    """What one core (or one chief) does per second.

    Attributes:
      worker_examples_per_core: Examples one worker core trains per second (input,
        forward and backward pass of the whole step).
      server_values_per_core: Float32 values one server core serves per second: rows
        gathered and dense weights read (sent), gradients applied by the optimizer.
      chief_closures: Closures (``steps_per_call`` steps each) one coordinator
        dispatches and collects per second.
      server_step_seconds: CPU seconds one server spends on every training step besides
        its values: taking its part of the step's call, running it, answering. Each step
        pays it on every server, so more servers cost more CPU in all.
    """

    worker_examples_per_core: float
    server_values_per_core: float
    chief_closures: float
    server_step_seconds: float = 0.0


#: The demo model's per-core rates from ``benchmarks/studies/capacity_rates.py``, the
#: defaults for a user who has not measured their own. The dated record is in
#: ``benchmarks/RESULTS.md``; docs/scaling.md#the-measured-rates explains them.
MEASURED_RATES = Rates(
    worker_examples_per_core=41_200,
    server_values_per_core=357_000_000,
    chief_closures=163,
    server_step_seconds=0.00265,
)


@dataclasses.dataclass(frozen=True)
class Machines:
    """What each server and worker machine has.

    Attributes:
      nic_bytes_per_second: A server's network bandwidth, each direction.
      server_memory_bytes: Memory a server may fill; None: not checked.
      worker_cores: Cores of one worker task.
      server_cores: Cores of one server task.
    """

    nic_bytes_per_second: float
    server_memory_bytes: float | None = None
    worker_cores: int = 1
    server_cores: int = 1


def shard_rows(rows: int, dim: int, min_shard_bytes: int, servers: int) -> list[int]:
    """Rows of each shard of a ``[rows, dim]`` float32 table over ``servers`` servers:
    ``MinSizePartitioner`` then the strategy's ``div`` layout."""
    shards = max(1, min(rows, servers, math.ceil(rows * dim * VALUE_BYTES / min_shard_bytes)))
    base, extra = divmod(rows, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def expected_distinct(lookups: float, span: int | None) -> float:
    """Expected distinct rows among ``lookups`` ids spread evenly over ``span`` rows
    (``None``: every id its own row): ``span (1 - (1 - 1/span)^lookups)``, an upper bound
    for real ids, which are skewed."""
    if span is None or lookups <= 0:
        return max(lookups, 0.0)
    if span == 1:
        return 1.0
    return span * -math.expm1(lookups * math.log1p(-1.0 / span))


@dataclasses.dataclass
class ServerLoad:
    """One server's share of a model: memory, and what one training step moves.

    Attributes:
      memory: Bytes per table (``"dense"``: the dense weights), slots included.
      bytes_out: Bytes it sends per step (rows gathered, dense weights read).
      bytes_in: Bytes it receives per step (ids, row gradients and their ids, dense
        gradients).
      values: Float32 values it gathers, sends or updates per step.
    """

    memory: dict[str, float] = dataclasses.field(default_factory=dict)
    bytes_out: float = 0.0
    bytes_in: float = 0.0
    values: float = 0.0

    def add_memory(self, name: str, nbytes: float) -> None:
        self.memory[name] = self.memory.get(name, 0.0) + nbytes

    def add_rows(self, rows: float, dim: int) -> None:
        """``rows`` distinct rows gathered, then their gradients applied."""
        self.bytes_out += rows * dim * VALUE_BYTES
        self.bytes_in += rows * (2 * ID_BYTES + dim * VALUE_BYTES)
        self.values += 2 * rows * dim

    def add_dense(self, parameters: int, reads_per_step: float) -> None:
        self.bytes_out += parameters * VALUE_BYTES * reads_per_step
        self.bytes_in += parameters * VALUE_BYTES
        self.values += parameters * (1 + reads_per_step)


def dense_reads_per_step(config: ExperimentConfig) -> float:
    """How often a step reads the dense weights: every step, or under
    ``train.dense_refresh_steps: N`` at each call's start and every ``N`` steps of it."""
    refresh, per_call = config.train.dense_refresh_steps, config.train.steps_per_call
    return 1.0 if refresh is None else math.ceil(per_call / refresh) / per_call


def server_loads(
    footprint: ModelFootprint,
    config: ExperimentConfig,
    servers: int,
    distinct: Mapping[str, float] | None = None,
) -> list[ServerLoad]:
    """Each server's memory and per-step traffic for ``config`` on ``servers`` servers.

    ``distinct``: measured distinct rows per batch of each table; a table it leaves out
    gets :func:`expected_distinct`.
    """

    def rows_of(table: TableUse) -> float:
        if distinct is not None and table.name in distinct:
            return distinct[table.name]
        return expected_distinct(batch * table.ids_per_example, table.id_span)

    loads = [ServerLoad() for _ in range(servers)]
    train, batch = config.train, config.input.batch_size
    optimizers = {
        False: train.embedding_optimizer.name,
        True: (train.linear_optimizer or train.embedding_optimizer).name,
    }
    stacks = {s.name: s for s in footprint.stacks}
    turn = 0  # the strategy's round-robin counter
    for variable in footprint.created:
        stack = stacks.get(variable.name)
        if stack is None:
            load = loads[turn % servers]
            turn += 1
            optimizer = train.dense_optimizer.name if variable.trainable else None
            load.add_memory("dense", table_bytes(variable.parameters, 1, optimizer))
            if variable.trainable:
                load.add_dense(variable.parameters, dense_reads_per_step(config))
            continue
        first = 0
        for rows in shard_rows(stack.rows, stack.dim, train.embedding_shard_bytes, servers):
            _place_rows(
                loads[turn % servers],
                stack.tables,
                first,
                first + rows,
                stack.dim,
                optimizers[stack.linear],
                rows_of,
            )
            turn += 1
            first += rows
    for table in footprint.dynamic:
        rows = table.table.rows
        memory = table_bytes(rows, table.dim, optimizers[table.linear]) + rows * DYNAMIC_ROW_BYTES
        for load in loads:
            load.add_memory(table.table.name, memory)
            load.add_rows(rows_of(table.table) / servers, table.dim)
    return loads


def _place_rows(
    load: ServerLoad,
    tables: tuple[TableUse, ...],
    start: int,
    end: int,
    dim: int,
    optimizer: str,
    rows_of: Callable[[TableUse], float],
) -> None:
    """Rows ``[start, end)`` of a stack on ``load``'s server: each table's part of them."""
    starts = list(itertools.accumulate((t.rows for t in tables), initial=0))
    for i in range(max(0, bisect.bisect_right(starts, start) - 1), len(tables)):
        table, first = tables[i], starts[i]
        if first >= end:
            break
        a, b = max(start, first), min(end, first + table.rows)
        if a < b:
            load.add_memory(table.name, table_bytes(b - a, dim, optimizer))
            load.add_rows(rows_of(table) * (b - a) / table.rows, dim)


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The examples per second each resource allows a cluster of ``workers`` and
    ``servers``; :attr:`binding` is the lowest."""

    workers: int
    servers: int
    by_resource: dict[str, float]

    @property
    def examples_per_second(self) -> float:
        return min(self.by_resource.values())

    @property
    def binding(self) -> str:
        return min(self.by_resource, key=self.by_resource.get)


def server_seconds_per_step(load: ServerLoad, rates: Rates) -> float:
    """CPU seconds one server core spends per training step on ``load``."""
    return rates.server_step_seconds + load.values / rates.server_values_per_core


def link_bytes_per_step(load: ServerLoad, workers: int) -> float:
    """Bytes per step that take a server's link each direction's time: the busier
    direction's, plus the other's divided by the workers. A worker reads its rows and
    weights, computes, then sends its gradients, so alone it leaves one direction idle
    while it uses the other (both directions add up); with more workers, one's reads
    overlap another's gradients."""
    busy, other = sorted((load.bytes_out, load.bytes_in), reverse=True)
    return busy + other / max(1, workers)


def chief_closures_for_training(rates: Rates) -> float:
    """Training closures one chief dispatches per second, after its other closures."""
    return max(0.0, rates.chief_closures - CHIEF_OTHER_CLOSURES_PER_SECOND)


def chief_seconds_per_step(rates: Rates, steps_per_call: int, steps_per_second: float) -> float:
    """The chief's CPU seconds per training step at ``steps_per_second``: its cost of a
    closure shared by the closure's steps, and its other closures of each second shared
    by that second's steps."""
    return (1 / steps_per_call + CHIEF_OTHER_CLOSURES_PER_SECOND / steps_per_second) / (
        rates.chief_closures
    )


def ceilings(
    loads: list[ServerLoad],
    config: ExperimentConfig,
    workers: int,
    rates: Rates,
    machines: Machines,
) -> Ceilings:
    """What each resource allows ``workers`` workers and the servers of ``loads``."""
    batch = config.input.batch_size
    busiest_seconds = max(server_seconds_per_step(load, rates) for load in loads)
    busiest_bytes = max(link_bytes_per_step(load, workers) for load in loads)
    return Ceilings(
        workers,
        len(loads),
        {
            "worker CPU": workers * machines.worker_cores * rates.worker_examples_per_core,
            "server CPU": _per_step(machines.server_cores, busiest_seconds) * batch,
            "server NIC": _per_step(machines.nic_bytes_per_second, busiest_bytes) * batch,
            "chief dispatch": chief_closures_for_training(rates)
            * config.train.steps_per_call
            * batch,
        },
    )


def _per_step(capacity: float, per_step: float) -> float:
    return math.inf if per_step <= 0 else capacity / per_step


@dataclasses.dataclass(frozen=True)
class Plan:
    """The answer for one target rate.

    Attributes:
      target: Examples per second asked for.
      smallest: The cluster with the fewest tasks (then the fewest servers) that meets
        the target and fits the server memory, or None when none does up to
        ``max_servers`` servers (the chief, or a server holding a whole dense variable,
        caps every cluster).
      configured: The config's own ``cluster.workers`` and ``cluster.ps``.
      loads: Each server's load in the smallest cluster (else the configured one).
      why_none: When ``smallest`` is None, what stops every cluster.
      best: When ``smallest`` is None, the fastest cluster that fits, with the fewest
        servers within 1% of its rate (None when none fits the memory).
    """

    target: float
    smallest: Ceilings | None
    configured: Ceilings
    loads: list[ServerLoad]
    why_none: str | None = None
    best: Ceilings | None = None


def plan(
    footprint: ModelFootprint,
    config: ExperimentConfig,
    target: float,
    rates: Rates,
    machines: Machines,
    distinct: Mapping[str, float] | None = None,
    max_servers: int = 256,
) -> Plan:
    """The smallest cluster that trains ``target`` examples per second (see :class:`Plan`).

    Workers only add worker CPU, so for each server count from 1 up the workers needed
    are ``ceil(target / examples per worker)``, and the first server count whose servers
    fit in memory and keep up gives the smallest cluster.
    """
    if target <= 0:
        raise ValueError(f"target must be a positive rate, got {target}")
    per_worker = machines.worker_cores * rates.worker_examples_per_core
    workers = max(1, math.ceil(target / per_worker))
    own = server_loads(footprint, config, config.cluster.ps, distinct)
    configured = ceilings(own, config, config.cluster.workers, rates, machines)
    if configured.by_resource["chief dispatch"] < target:
        return Plan(target, None, configured, own, why_none="chief dispatch")
    reasons, best = [], None
    for servers in range(1, max_servers + 1):
        loads = (
            own
            if servers == config.cluster.ps
            else server_loads(footprint, config, servers, distinct)
        )
        memory = max(sum(load.memory.values()) for load in loads)
        if machines.server_memory_bytes is not None and memory > machines.server_memory_bytes:
            reasons.append("server memory")
            continue
        found = ceilings(loads, config, workers, rates, machines)
        if found.examples_per_second >= target:
            return Plan(target, found, configured, loads)
        reasons.append(found.binding)
        if best is None or found.examples_per_second > 1.01 * best.examples_per_second:
            best = found
    why = max(set(reasons), key=reasons.count) if reasons else "nothing"
    return Plan(target, None, configured, own, why_none=why, best=best)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.3f} MB"


def memory_lines(loads: list[ServerLoad]) -> list[str]:
    """``memory`` lines, slots included: each table's bytes on each server holding part
    of it, largest first (tables under 1% of the fullest server summed on one line), and
    each server's total."""
    totals = [sum(load.memory.values()) for load in loads]
    names = sorted(
        {name for load in loads for name in load.memory},
        key=lambda n: -sum(load.memory.get(n, 0.0) for load in loads),
    )
    small = [
        n
        for n in names
        if n != "dense" and sum(load.memory.get(n, 0.0) for load in loads) < 0.01 * max(totals)
    ]
    lines = []
    for name in names:
        if name not in small:
            lines.append(
                f"memory   {name:16s} "
                + ", ".join(
                    f"ps{i} {_mib(load.memory[name])}"
                    for i, load in enumerate(loads)
                    if load.memory.get(name)
                )
            )
    if small:
        lines.append(
            f"memory   {len(small)} smaller tables: "
            + ", ".join(
                f"ps{i} {_mib(sum(load.memory.get(n, 0.0) for n in small))}"
                for i, load in enumerate(loads)
            )
        )
    return lines + [
        "memory   total per server: "
        + ", ".join(f"ps{i} {_mib(total)}" for i, total in enumerate(totals))
    ]


def traffic_lines(loads: list[ServerLoad], config: ExperimentConfig) -> list[str]:
    """``step`` lines: what one worker step sends to and receives from each server."""
    lines = [
        f"step     ps{i} sends {_mb(load.bytes_out)}, receives {_mb(load.bytes_in)}, "
        f"serves {load.values:,.0f} values"
        for i, load in enumerate(loads)
    ]
    total = sum(load.bytes_out + load.bytes_in for load in loads)
    lines.append(
        f"step     all servers: {_mb(total)} per step of {config.input.batch_size:,} "
        f"examples ({total / config.input.batch_size:,.0f} bytes per example)"
    )
    return lines


def ceiling_line(label: str, found: Ceilings) -> str:
    """One line: a cluster, the examples/s each resource allows it, and the binding one."""
    return (
        f"{label:8s} {found.workers} workers + {found.servers} ps: "
        + ", ".join(f"{name} {value:,.0f}" for name, value in found.by_resource.items())
        + f" examples/s; {found.binding} binds first"
    )


def plan_lines(result: Plan, config: ExperimentConfig) -> list[str]:
    """The planner's answer as printed by ``recsys-dist plan``."""
    lines = [ceiling_line("config", result.configured)]
    if result.smallest is None:
        lines.append(
            f"smallest none meets {result.target:,.0f} examples/s: "
            f"{result.why_none} caps every cluster"
            + (
                " (raise train.steps_per_call or input.batch_size)"
                if result.why_none == "chief dispatch"
                else ""
            )
        )
        if result.best is not None:
            lines.append(ceiling_line("fastest", result.best))
    else:
        lines.append(ceiling_line("smallest", result.smallest))
        others = {k: v for k, v in result.smallest.by_resource.items() if k != "worker CPU"}
        cap = min(others, key=others.get)
        lines.append(
            f"beyond   with {result.smallest.servers} ps, more workers help up to "
            f"{others[cap]:,.0f} examples/s, where {cap} binds"
        )
    which = "the smallest cluster" if result.smallest is not None else "the config's cluster"
    lines.append(f"servers  below: each server of {which} ({len(result.loads)} ps)")
    lines += traffic_lines(result.loads, config)
    return lines + memory_lines(result.loads)
