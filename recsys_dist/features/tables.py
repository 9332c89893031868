"""Embedding tables of a feature config (``tables:`` of ``features/*.yaml``).

A table is one embedding weight that one or several features index. Feature kinds
(:mod:`recsys_dist.features.kinds`) read a feature's table here: its rows, its dim, and
whether it is ``dynamic``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field
from typing import Literal

from recsys_dist.yaml_loader import LocatedYaml


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """An embedding table, possibly shared by several features.

    Attributes:
      name: Table name (the mapping key).
      dim: Embedding dimension.
      kind: ``hashed`` (ids hashed into ``rows`` rows; two ids may share one) or
        ``dynamic`` (every admitted id gets its own row on its parameter server).
      rows: Rows of a hashed table: the hash space or vocabulary size.
      capacity_per_shard: Rows of a dynamic table on each parameter server.
      admit_after: A dynamic table gives an id a row once it was seen in this many
        training batches; until then it reads a zero vector and gets no gradient.
      evict_after: A duration, ``<n>h`` or ``<n>d``: a run that warm-starts (daily
        retraining, ``follow``) drops the ids of a dynamic table last trained more than
        this long before its training window starts, and reuses their rows; ``None``: ids
        stay until the table is full.
      evict_after_days: ``evict_after`` in days (``evict_after_days: 7`` is
        ``evict_after: 7d``).
    """

    name: str
    dim: int = field(metadata={"min": 1})
    kind: Literal["hashed", "dynamic"] = "hashed"
    rows: int | None = field(default=None, metadata={"min": 1})
    capacity_per_shard: int | None = field(default=None, metadata={"min": 1})
    admit_after: int = field(default=1, metadata={"min": 1})
    evict_after: str | None = None
    evict_after_days: int | None = field(default=None, metadata={"min": 1})

    @property
    def dynamic(self) -> bool:
        return self.kind == "dynamic"

    @property
    def evict_after_hours(self) -> int | None:
        """``evict_after`` (or ``evict_after_days``) in hours; ``None`` when unset."""
        if self.evict_after_days is not None:
            return 24 * self.evict_after_days
        if self.evict_after is None:
            return None
        found = DURATION.fullmatch(self.evict_after.strip())
        if found is None:
            raise ValueError(f"evict_after {self.evict_after!r} is not a duration")
        return int(found[1]) * (24 if found[2] == "d" else 1)


#: ``evict_after``: a whole number of hours or days.
DURATION = re.compile(r"([1-9][0-9]*)\s*([hd])")


#: The id space of a dynamic table's keys: features hash their values into
#: ``[0, DYNAMIC_KEY_SPACE)`` (the last key is the missing value's), and the table
#: gives each admitted key its own row.
DYNAMIC_KEY_SPACE = 2**62


def check_table(doc: LocatedYaml, table: TableSpec) -> None:
    """A hashed table has ``rows``; a dynamic one ``capacity_per_shard`` and no ``rows``."""
    path = f"tables.{table.name}"
    if not table.dynamic:
        if table.rows is None:
            raise doc.error(
                path + ".rows",
                "missing required key; a hashed table needs its "
                "number of rows (or set kind: dynamic and capacity_per_shard)",
            )
        for key in ("capacity_per_shard", "evict_after", "evict_after_days"):
            if getattr(table, key) is not None:
                raise doc.error(f"{path}.{key}", "only applies to kind: dynamic")
        if table.admit_after != 1:
            raise doc.error(f"{path}.admit_after", "only applies to kind: dynamic")
        return
    if table.rows is not None:
        raise doc.error(
            path + ".rows",
            "does not apply to kind: dynamic (every admitted id "
            "gets its own row); set capacity_per_shard, the rows on each "
            "parameter server",
        )
    if table.capacity_per_shard is None:
        raise doc.error(
            path + ".capacity_per_shard",
            "missing required key; a dynamic table "
            "needs the number of rows it may hold on each parameter server",
        )
    if table.evict_after is not None:
        if table.evict_after_days is not None:
            raise doc.error(
                path + ".evict_after_days",
                "set evict_after or evict_after_days, not both",
            )
        if DURATION.fullmatch(str(table.evict_after).strip()) is None:
            raise doc.error(
                path + ".evict_after",
                f"{table.evict_after!r} is not a duration; expected a whole number of "
                "hours or days, such as 36h or 7d",
            )
