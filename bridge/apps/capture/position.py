"""Where the capture stands in the upstream's binlog: file/offset and the GTID set executed.

Both are tracked for every transaction; ``mode`` says which one a restart
resumes from:

- ``gtid`` on MariaDB: ``gtid_slave_pos`` form ``domain-server-seq[,...]``,
  one entry per replication domain (a transaction's GTID replaces its
  domain's entry);
- ``gtid`` on MySQL: a GTID set ``uuid:1-5:7,uuid2:1-3`` (a transaction's
  ``uuid:n`` is added to it);
- ``file``: the binlog file and the offset just after the transaction's last
  event.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

Flavor = str  # "mariadb" | "mysql"


@dataclass(frozen=True)
class Position:
    """A point between two transactions of the upstream's binlog."""

    flavor: Flavor
    mode: str  # "gtid" | "file"
    file: str = ""
    offset: int = 0
    gtid: str = ""  # the executed GTID set in the flavour's text form

    def after(self, file: str, offset: int, gtid: str | None) -> Position:
        """The position after a transaction that ended at ``file:offset`` and carried ``gtid``."""
        executed = self.gtid
        if gtid:
            executed = add_gtid(self.flavor, executed, gtid)
        return replace(self, file=file or self.file, offset=offset, gtid=executed)

    def to_json(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "mode": self.mode,
            "file": self.file,
            "offset": self.offset,
            "gtid": self.gtid,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        return cls(
            str(data["flavor"]), str(data["mode"]), str(data["file"]), int(data["offset"]), str(data["gtid"])
        )

    def describe(self) -> str:
        return f"gtid {self.gtid or '(empty)'}" if self.mode == "gtid" else f"{self.file}:{self.offset}"


def add_gtid(flavor: Flavor, executed: str, gtid: str) -> str:
    """``executed`` with one more transaction's ``gtid`` in it."""
    if flavor == "mariadb":
        return _add_mariadb(executed, gtid)
    return _add_mysql(executed, gtid)


def _add_mariadb(executed: str, gtid: str) -> str:
    domains: dict[int, str] = {}
    for entry in filter(None, (e.strip() for e in executed.split(","))):
        domains[int(entry.split("-")[0])] = entry
    domains[int(gtid.split("-")[0])] = gtid
    return ",".join(domains[d] for d in sorted(domains))


def _add_mysql(executed: str, gtid: str) -> str:
    source, _, number = gtid.rpartition(":")
    sets = parse_mysql_gtid_set(executed)
    intervals = sets.setdefault(source.lower(), [])
    n = int(number)
    intervals.append((n, n))
    intervals.sort()
    merged: list[tuple[int, int]] = []
    for low, high in intervals:
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    sets[source.lower()] = merged
    return format_mysql_gtid_set(sets)


def parse_mysql_gtid_set(text: str) -> dict[str, list[tuple[int, int]]]:
    """``uuid:1-5:7,uuid2:3`` -> {uuid: [(1, 5), (7, 7)], uuid2: [(3, 3)]}."""
    sets: dict[str, list[tuple[int, int]]] = {}
    for entry in filter(None, (e.strip() for e in text.replace("\n", "").split(","))):
        source, *ranges = entry.split(":")
        intervals = sets.setdefault(source.lower(), [])
        for item in ranges:
            low, _, high = item.partition("-")
            intervals.append((int(low), int(high or low)))
    return sets


def format_mysql_gtid_set(sets: dict[str, list[tuple[int, int]]]) -> str:
    parts = []
    for source in sorted(sets):
        ranges = ":".join(f"{lo}-{hi}" if hi != lo else str(lo) for lo, hi in sets[source])
        parts.append(f"{source}:{ranges}")
    return ",".join(parts)
