"""What ``bench latency`` watches: when each row became visible in each sink, and the percentiles.

:class:`MySQLWatcher` polls the downstream table; :class:`KafkaWatcher` consumes
the table's topic. Each records, per row, the wall time it was first seen; the
main thread compares it with its transaction's commit time (:class:`Txn`).
"""

from __future__ import annotations

import abc
import argparse
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from bridge import mysql
from bridge.dsn import Dsn

PARTITIONS = 3  # of the table's topic (the bench creates it before the sink would)


@dataclass(frozen=True, slots=True)
class Txn:
    """One offered transaction: rows ``first_id`` to ``first_id + rows - 1``, committed at ``committed``
    (wall-clock seconds)."""

    first_id: int
    rows: int
    commit_ts: int
    committed: float


@dataclass
class Run:
    """What one run names: the database, the Kafka prefix and topic, the parsed options."""

    args: argparse.Namespace
    sinks: tuple[str, ...]
    dsn: Dsn
    database: str
    prefix: str

    @property
    def topic(self) -> str:
        return f"{self.prefix}.{self.database}.orders"


# -- watchers: when each row became visible downstream -------------------------------------------


class Watcher(threading.Thread, abc.ABC):
    """A thread recording the wall time each row (or message) was first seen; stops on ``stop``."""

    def __init__(self, sink: str) -> None:
        super().__init__(name=f"bench-latency-{sink}", daemon=True)
        self.sink = sink
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            self.watch()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            self.ready.set()

    @abc.abstractmethod
    def watch(self) -> None:
        """Record when each row of the run becomes visible, until ``stop`` is set."""

    @abc.abstractmethod
    def count(self) -> int:
        """How many rows of the run have been seen."""


class MySQLWatcher(Watcher):
    """Polls the downstream table for row ids above the lowest one not yet seen."""

    def __init__(self, run: Run) -> None:
        super().__init__("mysql")
        self.run_ = run
        self.seen: dict[int, float] = {}
        self.polls = 0

    def count(self) -> int:
        return len(self.seen)

    def watch(self) -> None:
        conn = mysql.connect(self.run_.dsn, database=self.run_.database, autocommit=True)
        seen, low, interval = self.seen, 0, self.run_.args.poll_interval
        self.ready.set()
        try:
            with conn.cursor() as cursor:
                while not self.stop.is_set():
                    cursor.execute("SELECT `id` FROM `orders` WHERE `id` >= %s", (low,))
                    now = time.time()
                    self.polls += 1
                    for (row_id,) in cursor.fetchall():
                        seen.setdefault(int(row_id), now)
                    while low in seen:
                        low += 1
                    self.stop.wait(interval)
        finally:
            conn.close()


class KafkaWatcher(Watcher):
    """Consumes every partition of the table's topic from the beginning; row messages by
    ``(commit_ts, pos)``."""

    def __init__(self, run: Run) -> None:
        super().__init__("kafka")
        self.run_ = run
        self.seen: dict[tuple[int, int], float] = {}

    def count(self) -> int:
        return len(self.seen)

    def watch(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.run_.args.bootstrap_servers,
                "group.id": f"{self.run_.prefix}-watcher",  # required; assign() never joins the group
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            consumer.assign([TopicPartition(self.run_.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            self.ready.set()
            seen = self.seen
            while not self.stop.is_set():
                messages = consumer.consume(num_messages=1000, timeout=0.05)
                now = time.time()
                for message in messages:
                    if message.error() is not None:
                        raise KafkaException(message.error())
                    headers = dict(message.headers() or ())
                    if headers.get("bridge.kind") != b"row":
                        continue
                    key = (int(headers["bridge.commit-ts"] or b"0"), int(headers["bridge.pos"] or b"0"))
                    seen.setdefault(key, now)
        finally:
            consumer.close()


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``latencies`` (seconds) in milliseconds (nearest rank)."""
    ordered = sorted(latencies)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p * len(ordered)) - 1)] * 1000, 1)

    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99), "max_ms": rank(1.0)}


def summary(txns: list[Txn], seen_at: Callable[[Txn], list[float]]) -> dict[str, object]:
    """Percentiles of every row's latency, and the p99 of each quarter of the load (by commit time):
    a p99 that grows quarter by quarter means the pipeline fell behind the offered load."""
    latencies: list[float] = []
    quarters: list[list[float]] = [[], [], [], []]
    began = min(t.committed for t in txns)
    span = max(t.committed for t in txns) - began or 1.0
    for txn in txns:
        rows = [seen - txn.committed for seen in seen_at(txn)]
        latencies.extend(rows)
        quarters[min(3, int(4 * (txn.committed - began) / span))].extend(rows)
    trend = [percentiles(q)["p99_ms"] if q else None for q in quarters]
    return {**percentiles(latencies), "p99_ms_by_quarter": trend}


def mysql_summary(txns: list[Txn], seen: dict[int, float]) -> dict[str, object]:
    return summary(txns, lambda t: [seen[i] for i in range(t.first_id, t.first_id + t.rows)])


def kafka_summary(txns: list[Txn], seen: dict[tuple[int, int], float]) -> dict[str, object]:
    return summary(txns, lambda t: [seen[(t.commit_ts, pos)] for pos in range(t.rows)])
