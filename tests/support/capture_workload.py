"""A plain SQL client writing a capture source: no SDK, no status table, just pymysql.

:class:`SqlWorkload` runs in a thread until stopped: single-statement and
multi-statement transactions (inserts, updates, primary-key changes,
deletes, a rolled-back one now and then) on ``items`` (keyed, many types)
and ``logs`` (no key), and every ``ddl_every`` transactions a DDL: a column
added to or dropped from ``items``, a scratch table created, filled and
dropped. It counts what it did; :func:`create_tables` makes its tables.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql

from tests.support.mariadb_instance import MariaDBInstance

TABLES = (
    "CREATE TABLE items (id INT NOT NULL PRIMARY KEY, name VARCHAR(30) NOT NULL, qty INT NOT NULL, "
    "price DECIMAL(10,2), made DATETIME(3), tag ENUM('a','b','c'), body TEXT)",
    "CREATE TABLE logs (item INT NOT NULL, what VARCHAR(20))",
)


def create_tables(source: MariaDBInstance, db: str, rows: int) -> None:
    """The workload's tables in a new database ``db``, ``items`` with ``rows`` rows."""
    conn = source.connect()
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{db}`")
            cursor.execute(f"USE `{db}`")
            for statement in TABLES:
                cursor.execute(statement)
            for first in range(0, rows, 500):
                values = ", ".join(
                    f"({i}, 'n{i}', {i % 17}, {i}.5, '2024-02-03 04:05:06.{i % 1000:03d}', "
                    f"'{'abc'[i % 3]}', 'b{i}')"
                    for i in range(first, min(rows, first + 500))
                )
                cursor.execute(f"INSERT INTO items VALUES {values}")
    finally:
        conn.close()


@dataclass
class SqlWorkload:
    source: MariaDBInstance
    db: str
    seed: int = 1
    ddl_every: int = 40
    first_id: int = 1_000_000
    # transactions per second at most (0: as fast as the source takes them). A paced load gives
    # the pipeline the same work on a quiet machine as on a busy one, so a test's catch-up after
    # it does not grow with the machine's speed.
    rate: float = 0.0
    transactions: int = 0
    ddl: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sql-workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        assert not self.errors, self.errors

    def _run(self) -> None:
        rng = random.Random(self.seed)
        conn = self.source.connect(self.db)
        next_id = self.first_id
        extra: list[str] = []
        started = time.monotonic()
        try:
            with conn.cursor() as cursor:
                while not self._stop.is_set():
                    if self.transactions % self.ddl_every == self.ddl_every - 1:
                        self._ddl(cursor, rng, extra)
                    next_id = self._transaction(cursor, rng, next_id)
                    self.transactions += 1
                    if self.rate > 0:
                        self._stop.wait(started + self.transactions / self.rate - time.monotonic())
        except pymysql.err.MySQLError as exc:
            self.errors.append(repr(exc))
        finally:
            conn.close()

    def _transaction(self, cursor: Any, rng: random.Random, next_id: int) -> int:
        statements = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(("insert", "insert", "update", "update", "rekey", "delete", "log"))
            pick = rng.randint(0, next_id)
            if kind == "insert":
                statements.append(
                    f"INSERT INTO items (id, name, qty, price, tag) VALUES ({next_id}, 'w{next_id}', "
                    f"{rng.randint(0, 99)}, {rng.randint(0, 9999)}.{rng.randint(0, 99):02d}, 'b')"
                )
                next_id += 1
            elif kind == "update":
                statements.append(
                    f"UPDATE items SET qty = qty + 1, body = 'u{pick}' WHERE id BETWEEN {pick} AND {pick + 3}"
                )
            elif kind == "rekey":
                statements.append(f"UPDATE IGNORE items SET id = {next_id} WHERE id = {pick}")
                next_id += 1
            elif kind == "delete":
                statements.append(f"DELETE FROM items WHERE id = {pick}")
            else:
                statements.append(f"INSERT INTO logs VALUES ({pick % 50}, 'l{rng.randint(0, 3)}')")
                statements.append(f"DELETE FROM logs WHERE item = {rng.randint(0, 49)} LIMIT 1")
        cursor.execute("BEGIN")
        for statement in statements:
            cursor.execute(statement)
        cursor.execute("ROLLBACK" if rng.random() < 0.05 else "COMMIT")
        return next_id

    def _ddl(self, cursor: Any, rng: random.Random, extra: list[str]) -> None:
        self.ddl += 1
        if len(extra) < 2 and rng.random() < 0.6:
            name = f"x{self.ddl}"
            cursor.execute(f"ALTER TABLE items ADD COLUMN {name} INT NULL")
            cursor.execute(f"UPDATE items SET {name} = id % 7 WHERE id % 5 = 0")
            extra.append(name)
        elif extra:
            cursor.execute(f"ALTER TABLE items DROP COLUMN {extra.pop(0)}")
        scratch = f"scratch{self.ddl}"
        cursor.execute(f"CREATE TABLE {scratch} (k INT PRIMARY KEY, v VARCHAR(5))")
        cursor.execute(f"INSERT INTO {scratch} VALUES (1, 'a'), (2, 'b')")
        if self.ddl % 2:
            cursor.execute(f"DROP TABLE {scratch}")
