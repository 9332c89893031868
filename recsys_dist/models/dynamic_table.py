"""Collision-free embedding tables: every admitted id gets its own row.

A dynamic table (``kind: dynamic``) gives each id its own row, allocated the first time
the id is admitted, on the parameter server that owns it (shard ``mix(id) % shards``).
Its state is stock TensorFlow (hash tables and variables), so checkpoints, eviction and
an export use stock ops only and the export serves with plain TensorFlow. Training
admits ids with the op library's ``AdmitIds`` kernel (``recsys_dist/ops/dynamic_admission.cc``):
one call per server and step for every id index there, under a mutex per index, since
TensorFlow has no find-or-insert op and ``next_row.assign_add`` is not safe under
concurrency. The lookups are :mod:`recsys_dist.models.dynamic_lookup`'s; a table read by
several layers of one model keeps one id index (:class:`ModelTables`);
checkpoints hold the rows in use only (``models/rows_in_use.py``). See
docs/dynamic-tables.md.
"""

from __future__ import annotations

import datetime
from typing import Any

import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.features.config import TableSpec
from recsys_dist.models.blocks import InitializerLike, derive_seed, seeded_initializer
from recsys_dist.models.dynamic_lookup import lookup_tables, on_server
from recsys_dist.models.rows_in_use import row_slots, save_rows_in_use
from recsys_dist.models.sharding import Placement

#: Rows are stamped with the hour they were last trained (``last_seen``): hours since
#: this instant, UTC.
EPOCH = datetime.datetime(1970, 1, 1)

#: Stamps below this are day numbers since :data:`EPOCH`, the unit of checkpoints that
#: stamped days; eviction reads each as its day's first hour. Every hour stamp after
#: 1992 is above it.
FIRST_HOUR_STAMP = 200_000

#: Marks the ``emb`` variables whose sparse gradients never repeat a row within a step:
#: a step gathers each distinct id of a shard once, and each id has its own row. The
#: optimizers skip their de-duplication of such gradients (``train/optimizers.py``).
UNIQUE_ROWS = "_recsys_dist_unique_rows"


def has_unique_rows(variable) -> bool:
    """Whether ``variable`` is a dynamic table's rows (see :data:`UNIQUE_ROWS`)."""
    return bool(getattr(variable, UNIQUE_ROWS, False))


def hour_number(at: datetime.datetime | datetime.date) -> int:
    """The hour stamp of ``at`` (a date: its first hour)."""
    if not isinstance(at, datetime.datetime):
        at = datetime.datetime.combine(at, datetime.time())
    return (at - EPOCH) // datetime.timedelta(hours=1)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def stamps_in_hours(stamps: tf.Tensor) -> tf.Tensor:
    """``last_seen`` stamps as hour stamps (see :data:`FIRST_HOUR_STAMP`)."""
    return tf.where(stamps < FIRST_HOUR_STAMP, stamps * 24, stamps)


class ShardGroup:
    """The servers (one shard each) of dynamic tables that are resolved together: every
    dynamic table of a model shares one group (:class:`ModelTables`), so a training step
    admits the ids of all of them in one ``AdmitIds`` call per server. A plain holder,
    not saved."""

    def __init__(self, devices: list[str | None]):
        self.devices = list(devices)


class ModelTables:
    """What the embedding layers of one model share, given to each layer it builds: the
    model's :class:`Placement`, one :class:`ShardGroup` for every dynamic table, and per
    dynamic table name the table that owns the id index (the first one built). A plain
    holder, not saved (the tables are saved where the layers hold them).

    Args:
      placement: Where the tables live; its ``dynamic_shards`` is each dynamic table's
        shard count (default: this process, one shard).
    """

    def __init__(self, placement: Placement | None = None):
        self.placement = placement or Placement()
        shards = self.placement.dynamic_shards
        self.group = ShardGroup(self.placement.shard_devices(shards))
        self._index_owners: dict[str, DynamicTable] = {}

    def dynamic_table(
        self, table: TableSpec, dim: int, initializer: InitializerLike, seed: int | None, name: str
    ) -> "DynamicTable":
        """A layer's :class:`DynamicTable` for ``table`` in this model's shard group; the
        second and later layers that read ``table`` share the first one's id index."""
        owner = self._index_owners.get(table.name)
        made = DynamicTable(
            table,
            dim,
            self.placement.dynamic_shards,
            initializer,
            seed,
            name,
            self.group,
            index_of=owner,
            placement=self.placement,
        )
        self._index_owners.setdefault(table.name, made)
        return made


class _Counting:
    """Whether training counts sightings for admission: a variable on the shard's server
    in a plain holder, so checkpoints do not save it (the trainer sets it every pass)."""

    def __init__(self, name: str):
        self.on = tf.Variable(True, trainable=False, name=name)


class _Untracked:
    """A plain holder: what it holds is not saved through it (a table's link to the table
    whose index it shares; that table is saved where it lives)."""

    def __init__(self, value):
        self.value = value


class DynamicShard(tf.Module):
    """One parameter server's part of a dynamic table.

    - ``index``: a ``MutableHashTable`` id -> row (-1 for an unknown id);
    - ``counts``: a ``MutableHashTable`` id -> training batches it appeared in, for ids not
      admitted yet (only when ``admit_after > 1``), counted in a run's first pass over its
      rows only (:meth:`DynamicTable.count_sightings`);
    - ``emb``: the ``[capacity_per_shard, dim]`` rows (the optimizer's slots are created
      next to it), ``last_seen``: the hour stamp of each row's last training
      (:func:`hour_number`), ``next_row``: rows in use, ``day``: the stamp that training
      gives its rows now;
    - counters: ``dropped_full`` (ids refused because the shard was full) and ``waiting``
      (lookups of ids not admitted yet, or refused).

    With ``index_of`` (the same shard of the table that owns the id index), the shard
    shares that shard's index, counts, last-seen stamps and counters, and has only its own
    rows."""

    def __init__(
        self,
        table: TableSpec,
        dim: int,
        index: int,
        device: str | None,
        initializer: InitializerLike,
        seed: int | None,
        name: str,
        index_of: "DynamicShard | None" = None,
        placement: Placement | None = None,
    ):
        super().__init__(name=name)
        self.capacity, self.admit_after = table.capacity_per_shard, table.admit_after
        self.device = device
        with (placement or Placement()).variables_on(device, name):
            init = seeded_initializer(initializer, derive_seed(seed, name))
            self._row_initializer = init  # freed rows restart from it (eviction)
            self.emb = tf.Variable(init((self.capacity, dim), tf.float32), name=f"{name}_emb")
            setattr(self.emb, UNIQUE_ROWS, True)
            if index_of is not None:
                if (index_of.device, index_of.capacity) != (device, self.capacity):
                    raise ValueError(
                        f"{name}: shares the id index of {index_of.name} but "
                        f"not its server and capacity"
                    )
                self.index, self.counts = index_of.index, index_of.counts
                self.last_seen, self.next_row = index_of.last_seen, index_of.next_row
                self.day, self.dropped_full = index_of.day, index_of.dropped_full
                self.waiting, self._counting = index_of.waiting, index_of._counting
                save_rows_in_use(self.emb, self.next_row, table.name, index)
                return
            self.index = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.int64, default_value=-1, name=f"{name}_index"
            )
            self.counts = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.int64, default_value=0, name=f"{name}_counts"
            )
            self.last_seen = tf.Variable(
                tf.zeros([self.capacity], tf.int64), trainable=False, name=f"{name}_last_seen"
            )
            self.next_row = tf.Variable(
                tf.constant(0, tf.int64), trainable=False, name=f"{name}_next_row"
            )
            self.day = tf.Variable(
                tf.constant(hour_number(_utc_now()), tf.int64),
                trainable=False,
                name=f"{name}_day",
            )
            self.dropped_full = tf.Variable(
                tf.constant(0, tf.int64), trainable=False, name=f"{name}_dropped_full"
            )
            self.waiting = tf.Variable(
                tf.constant(0, tf.int64), trainable=False, name=f"{name}_waiting"
            )
            self._counting = _Counting(f"{name}_counting")
            for rows in (self.emb, self.last_seen):
                save_rows_in_use(rows, self.next_row, table.name, index)

    @property
    def counting(self) -> tf.Variable:
        """The switch (bool) that lets training count sightings (see
        :meth:`DynamicTable.count_sightings`); the admission kernel reads it."""
        return self._counting.on

    def find(self, keys: tf.Tensor) -> tf.Tensor:
        """Rows of ``keys`` (-1: no row); inserts and counts nothing."""
        with on_server(self.device):
            return tf.reshape(self.index.lookup(keys), [-1])

    def evict(
        self,
        oldest: int,
        slots: list[tuple[tf.Variable, float]],
        sharing: list[tuple["DynamicShard", list[tuple[tf.Variable, float]]]] = (),
    ) -> tuple[int, int]:
        """Drops the ids last seen before hour stamp ``oldest`` and compacts the rows:
        the kept ones move to the front in their order (with their optimizer slots and
        last-seen stamps), the freed rows restart from the initializer and their slots from
        their initial values, and the admission counts start over. ``slots`` are the
        optimizer slots of ``emb`` with the value a fresh row starts from, ``sharing`` the
        shards that share this one's index, each with its slots (their rows move the same
        way). Returns ``(ids kept, ids dropped)``. Call with no step in flight."""
        with tf.device(self.device):
            keys, rows = self.index.export()
            order = tf.argsort(rows)
            keys, rows = tf.gather(keys, order), tf.gather(rows, order)
            keep = stamps_in_hours(tf.gather(self.last_seen, rows)) >= oldest
            kept_keys, kept_rows = tf.boolean_mask(keys, keep), tf.boolean_mask(rows, keep)
            kept, used = int(tf.size(kept_rows)), int(self.next_row.numpy())
            moved, freed = tf.range(kept, dtype=tf.int64), tf.range(kept, used, dtype=tf.int64)

            def compact(variable: tf.Variable, fresh: tf.Tensor) -> None:
                variable.scatter_update(tf.IndexedSlices(tf.gather(variable, kept_rows), moved))
                variable.scatter_update(tf.IndexedSlices(fresh, freed))

            compact(self.last_seen, tf.zeros([used - kept], tf.int64))
            for shard, its_slots in [(self, slots), *sharing]:
                shape = [used - kept, int(shard.emb.shape[1])]
                compact(shard.emb, shard._row_initializer(shape, tf.float32))
                for slot, value in its_slots:
                    compact(slot, tf.fill(shape, tf.constant(value, slot.dtype)))
            self.index.remove(keys)
            self.index.insert(kept_keys, moved)
            self.next_row.assign(kept)
            self.counts.remove(self.counts.export()[0])
        return kept, int(tf.size(keys)) - kept


class DynamicTable(tf.Module):
    """A collision-free table sharded over the parameter servers.

    Args:
      table: The table's spec (``kind: dynamic``).
      dim: Embedding dim (the table's, or the linear model's outputs).
      shards: Number of shards (each on the device ``placement`` gives it: under
        ``ParameterServerStrategy`` round-robin on the parameter servers).
      initializer: Initializer of the rows (each row starts from it when admitted).
      seed: Seed of the initializer.
      name: Variable name prefix.
      group: The shard group it is resolved with, on the same servers (default: its own).
      index_of: A table (of the same spec, on the same servers) whose id index this one
        shares: an id then has the same row in both, and this table holds only its rows.
      placement: Where its shards live and how it is read (default: this process).

    Raises:
      ValueError: ``group`` or ``index_of`` is on other servers, or ``index_of`` has
        another spec or number of shards.
    """

    def __init__(
        self,
        table: TableSpec,
        dim: int,
        shards: int = 1,
        initializer: InitializerLike = "random_uniform",
        seed: int | None = None,
        name: str = "dynamic",
        group: ShardGroup | None = None,
        index_of: "DynamicTable | None" = None,
        placement: Placement | None = None,
    ):
        super().__init__(name=name)
        self.placement = placement or Placement()
        devices = self.placement.shard_devices(shards)
        if group is not None and group.devices != devices:
            raise ValueError(
                f"dynamic tables of one model on different servers: {group.devices} and {devices}"
            )
        if index_of is not None and (
            index_of.spec != table or len(index_of.shards) != len(devices)
        ):
            raise ValueError(
                f"dynamic table {name} cannot share the id index of "
                f"{index_of.name}: another spec or number of shards"
            )
        self.spec, self.dim = table, dim
        self._index_of = _Untracked(index_of)
        self.shards = [
            DynamicShard(
                table,
                dim,
                i,
                device,
                initializer,
                seed,
                f"{name}_{i}",
                index_of.shards[i] if index_of is not None else None,
                self.placement,
            )
            for i, device in enumerate(devices)
        ]
        self.group = group or ShardGroup(devices)

    @property
    def index_owner(self) -> "DynamicTable":
        """The table whose id index this one uses: itself, or the one it shares."""
        return self._index_of.value or self

    @property
    def embedding_variables(self) -> list[tf.Variable]:
        return [shard.emb for shard in self.shards]

    def shard_of(self, keys: tf.Tensor) -> tf.Tensor:
        """The shard (int32) of each key."""
        return tf.cast(hashing.to_bucket(hashing.hash_int64(keys), len(self.shards)), tf.int32)

    def lookup(self, keys: tf.Tensor, training: bool = False) -> tf.Tensor:
        """``[N, dim]`` vectors of 1-D int64 ``keys``: each distinct key resolved once, on
        its shard. Training admits new keys (see :class:`DynamicShard`)."""
        return lookup_tables([self], [keys], training)[0]

    def count_sightings(self, on: bool) -> None:
        """Whether training counts the batches an id appears in towards ``admit_after``:
        on in a run's first pass over its rows, off in the passes after it (they would
        count the same examples again, and every id seen once would be admitted in the
        second pass). Ids already due are admitted either way."""
        for shard in self.shards:
            shard.counting.assign(on)

    def stamp_trained_rows(self, at: datetime.datetime | datetime.date) -> None:
        """Marks the rows trained from now on as last seen at ``at``'s hour."""
        for shard in self.shards:
            shard.day.assign(hour_number(at))

    def evict(
        self, oldest: datetime.datetime, optimizers: list, sharing: list["DynamicTable"] = ()
    ) -> dict[str, int]:
        """Drops the ids last seen before ``oldest``'s hour on every shard (see
        :meth:`DynamicShard.evict`); ``optimizers`` are the live ones, whose slots of the
        rows move with them. ``sharing``: every table that shares this one's index (their
        rows move too; :func:`evict_tables` finds them). Returns ``{"kept": ...,
        "evicted": ...}`` over the shards."""
        if self.index_owner is not self:
            raise ValueError(
                f"{self.name} shares the id index of {self.index_owner.name}: "
                "evict through that table"
            )
        kept = evicted = 0
        for i, shard in enumerate(self.shards):
            k, e = shard.evict(
                hour_number(oldest),
                row_slots(shard.emb, optimizers),
                [(t.shards[i], row_slots(t.shards[i].emb, optimizers)) for t in sharing],
            )
            kept, evicted = kept + k, evicted + e
        return {"kept": kept, "evicted": evicted}

    def stats(self) -> dict[str, Any]:
        """Live ids, capacity, ids refused for a full shard, lookups without a row and
        the ids counted but not admitted yet, summed over the shards; and the share of
        its capacity the fullest shard uses (``fullest_shard``)."""
        live = [int(s.next_row.numpy()) for s in self.shards]
        return {
            "live_ids": sum(live),
            "capacity": int(self.spec.capacity_per_shard * len(self.shards)),
            "fullest_shard": round(max(live) / self.spec.capacity_per_shard, 4),
            "dropped_full": int(sum(int(s.dropped_full.numpy()) for s in self.shards)),
            "lookups_without_row": int(sum(int(s.waiting.numpy()) for s in self.shards)),
            "counted_not_admitted": int(sum(int(s.counts.size().numpy()) for s in self.shards)),
            "shards": len(self.shards),
        }


def evict_tables(
    tables: list[DynamicTable], oldest: datetime.datetime, optimizers: list
) -> dict[str, dict[str, int]]:
    """:meth:`DynamicTable.evict` of ``tables``, each id index once with every table that
    shares it. Returns the result by table name (the same for tables sharing an index)."""
    done: dict[str, dict[str, int]] = {}
    for owner in dict.fromkeys(t.index_owner for t in tables):
        sharing = [t for t in tables if t.index_owner is owner and t is not owner]
        result = owner.evict(oldest, optimizers, sharing)
        done.update((t.name, result) for t in [owner, *sharing])
    return done
