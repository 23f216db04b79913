"""The workload of ``bench mysql``: a mix of row changes whose outcome is known.

Each preloading task (:class:`KeyOwner`) owns its keys and draws every
change's kind from the mix: an insert of a new row, an update or delete of
one of its live rows. :class:`Model` records the live rows' versions, so the
downstream table can be checked against it (row count, ``SUM(customer)``,
``SUM(weight)``) and the changes replayed in order by a plain applier.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.drainer import row_values
from bridge import mysql
from bridge.binlog import TableMutationBuilder
from bridge.dsn import Dsn
from bridge.errors import ConfigError
from bridge.rowcodec import RowCodec
from drainer.sinks.mysql.config import auto_processes, usable_cores

KINDS = ("insert", "update", "delete")
DEFAULT_MIX = {"insert": 60, "update": 30, "delete": 10}


def parse_mix(text: str) -> dict[str, int]:
    """``"insert=60,update=30"`` -> weights of every kind (unnamed ones 0); at least one insert."""
    mix = dict.fromkeys(KINDS, 0)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = part.partition("=")
        if not sep or name.strip() not in mix or not weight.strip().isdigit():
            raise ConfigError(
                f"--mix: expected kind=weight with kind one of {', '.join(KINDS)}; got {part!r}"
            )
        mix[name.strip()] = int(weight)
    if mix["insert"] <= 0:
        raise ConfigError("--mix: the insert weight must be positive (updates and deletes need rows)")
    return mix


def bench_row(key: int, version: int) -> tuple[object, ...]:
    """Row ``key`` after its ``version``-th change: :func:`bench.drainer.row_values` with the
    customer, weight and flag moved by the version."""
    values = list(row_values(key))
    values[1] = (key + version * 7_919) % 10_007
    values[3] = key * 0.25 + version
    values[6] = (key + version) % 2
    return tuple(values)


@dataclass
class Model:
    """What the downstream table must hold once the drainer caught up: the live rows' versions."""

    live: dict[int, int] = field(default_factory=dict)  # key -> version
    changes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    # every change as made: (kind, key, version after it); each key's changes in commit order
    ops: list[tuple[str, int, int]] = field(default_factory=list)

    def expected(self) -> tuple[int, int, float]:
        """(row count, SUM(customer), SUM(weight)) of the live rows."""
        count, customers, weights = 0, 0, 0.0
        for key, version in self.live.items():
            row = bench_row(key, version)
            count += 1
            customers += int(row[1])  # type: ignore[call-overload]
            weights += float(row[3])  # type: ignore[arg-type]
        return count, customers, weights


class KeyOwner:
    """One preloading task: its own keys (``task + n * tasks``), their live versions, its choices."""

    def __init__(self, task: int, tasks: int, seed: int, mix: dict[str, int], model: Model) -> None:
        self._rng = random.Random(f"{seed}:{task}")
        self._next = task
        self._stride = tasks
        self._kinds = [k for k in KINDS if mix[k] > 0]
        self._weights = [mix[k] for k in self._kinds]
        self._live: list[int] = []
        self._model = model

    def txn(self, codec: RowCodec, table_id: int, changes: int, one_kind: bool) -> TableMutationBuilder:
        """A transaction of ``changes`` row changes: each of a kind drawn from the mix, or all of
        one drawn kind when ``one_kind`` (an update or delete with no live row left inserts)."""
        mutation = TableMutationBuilder(table_id)
        live, versions = self._live, self._model.live
        txn_kind = self._rng.choices(self._kinds, self._weights)[0]
        for _ in range(changes):
            kind = txn_kind if one_kind else self._rng.choices(self._kinds, self._weights)[0]
            kind = kind if live else "insert"
            if kind == "insert":
                key, self._next = self._next, self._next + self._stride
                mutation.insert(codec.encode(bench_row(key, 0)))
                versions[key] = 0
                live.append(key)
            else:
                index = self._rng.randrange(len(live))
                key = live[index]
                before = codec.encode(bench_row(key, versions[key]))
                if kind == "update":
                    versions[key] += 1
                    mutation.update(before, codec.encode(bench_row(key, versions[key])))
                else:
                    mutation.delete(before)
                    live[index] = live[-1]
                    live.pop()
                    del versions[key]
            self._model.changes[kind] += 1
            self._model.ops.append((kind, key, versions.get(key, -1)))
        return mutation


def txn_sizes(rows: int, per_txn: int) -> Iterator[int]:
    full, rest = divmod(rows, per_txn)
    yield from (per_txn for _ in range(full))
    if rest:
        yield rest


def processes_arg(text: str) -> int | str:
    return text if text == "auto" else int(text)


def worker_processes(args: argparse.Namespace) -> int:
    """``--worker-processes`` as the sink resolves it on this machine."""
    setting = args.worker_processes
    return setting if isinstance(setting, int) else auto_processes(usable_cores(), args.worker_count)


def check_table(dsn: Dsn, db: str, table: str, expected: tuple[int, int, float]) -> dict[str, Any]:
    """``db.table`` (the workload's shape) against ``expected`` (rows, SUM(customer), SUM(weight));
    RuntimeError naming both when they differ."""
    count, customers, weights = expected
    conn = mysql.connect(dsn, database=db, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*), SUM(`customer`), SUM(`weight`) FROM `{table}`")  # noqa: S608
            got = cursor.fetchone()
    finally:
        conn.close()
    assert got is not None
    found = (int(got[0]), int(got[1] or 0), float(got[2] or 0.0))
    if found[:2] != (count, customers) or abs(found[2] - weights) > 1e-6 * max(1.0, abs(weights)):
        raise RuntimeError(
            f"downstream {db}.{table}: (rows, SUM(customer), SUM(weight)) = {found}, "
            f"expected {(count, customers, weights)}"
        )
    return {"rows": count, "checked": "row count, SUM(customer), SUM(weight)"}
