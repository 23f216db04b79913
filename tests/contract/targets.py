"""The downstreams of the contract suite: one per registered sink and a fan-out of two.

A :class:`Target` makes sinks writing to one real downstream (MariaDB, the Tansu broker,
Redis, a SQLite directory, a binlog-file directory), makes that downstream fail for real
and retriably (:meth:`Target.break_` / :meth:`Target.heal`: a TCP forwarder unplugged, a
SQLite file locked by another connection, the file sink's next file names taken), and
compares what it holds with the workload's model (:meth:`Target.check`), through
``bridge.apps.diff`` as the end-to-end tests do (Kafka: the topics applied with the
``consume --apply`` library code first; binlog files: replayed first; Redis: every key of
the database and its JSON document).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pymysql
import redis

from bridge.apps.consume.apply import Applier, sink_for
from bridge.apps.consume.reader import ChangeReader
from bridge.apps.consume.runner import Limits, run_apply
from bridge.apps.diff import diff
from bridge.sink.contract import Sink
from bridge.sink.registry import FanOutSink
from drainer.relay.replay import replay
from drainer.sinks.file.binlogfile import file_name, list_files
from drainer.sinks.file.sink import FileSink
from drainer.sinks.kafka.sink import KafkaSink
from drainer.sinks.mysql.sink import MySQLSink
from drainer.sinks.redis import RedisSink
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.contract.workload import Workload
from tests.support.process import ChildProcess, free_port, wait_until
from tests.support.tansu import tansu_binary
from tests.support.tcp_proxy import TcpProxy

MYSQL = ("127.0.0.1", 3306)
REDIS = ("127.0.0.1", 6379)
HANG_GUARD = 60.0  # seconds: a safety net against hangs, never a performance assertion


def assert_sql_equal(workload: Workload, position: int, downstream: str, scratch: Path) -> None:
    """``downstream`` (a DSN) holds exactly the model's tables and rows at ``position``."""
    upstream = workload.upstream_at(scratch / "expected.db", position)
    tables = [f"{workload.db}.{name}" for name in workload.tables_at(position)]
    report = diff(upstream, downstream, tables=tables)
    assert report.equal, f"at commit_ts {position}:\n" + "\n".join(report.lines())


class Target(ABC):
    """One downstream; see the module docstring."""

    name = ""
    fails_open = True  # whether break_() makes open() fail (a file directory cannot)

    def __init__(self, workdir: Path, db: str) -> None:
        self.workdir = workdir
        self.db = db
        self.scratch = workdir / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._checks = 0

    @abstractmethod
    def sink(self) -> Sink:
        """A new sink object writing to this downstream."""

    @abstractmethod
    def break_(self) -> None:
        """From now on the downstream fails retriably."""

    @abstractmethod
    def heal(self) -> None: ...

    @abstractmethod
    def check(self, workload: Workload, position: int) -> None:
        """The downstream equals the model at ``position``."""

    def local_paths(self) -> list[Path]:
        """Where the sink keeps files (no descriptor may point there once it is closed)."""
        return []

    def cleanup(self) -> None:
        return None

    def scratch_dir(self) -> Path:
        self._checks += 1
        path = self.scratch / f"check-{self._checks}"
        path.mkdir()
        return path


class MySQLTarget(Target):
    name = "mysql"

    def __init__(self, workdir: Path, db: str) -> None:
        super().__init__(workdir, db)
        self.proxy = TcpProxy(MYSQL)
        self.proxy.plug()

    def sink(self) -> Sink:
        config = {
            "dsn": f"mysql://root@127.0.0.1:{self.proxy.port}/",
            "progress-schema": f"{self.db}_p",
            "worker-count": 4,
            "connect-timeout": "1s",
            "retry-max": "0.2s",
        }
        return MySQLSink(config, self.workdir)

    def break_(self) -> None:
        unplug(self.proxy)

    def heal(self) -> None:
        plug(self.proxy)

    def check(self, workload: Workload, position: int) -> None:
        downstream = f"mysql://root@{MYSQL[0]}:{MYSQL[1]}/{self.db}"
        assert_sql_equal(workload, position, downstream, self.scratch_dir())

    def cleanup(self) -> None:
        self.proxy.unplug()
        conn = pymysql.connect(host=MYSQL[0], port=MYSQL[1], user="root", autocommit=True)
        try:
            with conn.cursor() as cur:
                for name in (self.db, f"{self.db}_p"):
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()


class RedisTarget(Target):
    """Upsert mode: every row's key holds its after-image as JSON, so the keys are the table."""

    name = "redis"

    def __init__(self, workdir: Path, db: str) -> None:
        super().__init__(workdir, db)
        self.proxy = TcpProxy(REDIS)
        self.proxy.plug()
        self.client = redis.Redis(host=REDIS[0], port=REDIS[1], decode_responses=True)

    def sink(self) -> Sink:
        config = {
            "url": f"redis://127.0.0.1:{self.proxy.port}/0",
            "timeout": "1s",
            "connect-timeout": "1s",
            "rules": [{"db": self.db, "modes": ["upsert"]}],
        }
        return RedisSink(config, self.workdir)

    def break_(self) -> None:
        unplug(self.proxy)

    def heal(self) -> None:
        plug(self.proxy)

    def check(self, workload: Workload, position: int) -> None:
        expected = {
            f"{self.db}:{name}:{key}": image
            for name, table in workload.tables_at(position).items()
            for key, image in table.images.items()
        }
        keys = sorted(self.client.scan_iter(match=f"{self.db}:*", count=1000))
        found = {key: json.loads(self.client.get(key) or "null") for key in keys}
        assert found == expected, f"at commit_ts {position}"

    def cleanup(self) -> None:
        self.proxy.unplug()
        keys = list(self.client.scan_iter(match=f"{self.db}:*", count=1000))
        if keys:
            self.client.delete(*keys)
        self.client.close()


class KafkaTarget(Target):
    """The shared broker; with ``faults`` a broker of its own behind a TCP forwarder (the shared
    one advertises its own address, so clients would pass any forwarder after the first
    metadata answer)."""

    name = "kafka"

    def __init__(self, workdir: Path, db: str, bootstrap: str, faults: bool) -> None:
        super().__init__(workdir, db)
        self.broker: ChildProcess | None = None
        self.proxy: TcpProxy | None = None
        self.bootstrap = bootstrap
        if faults:
            port = free_port()
            self.proxy = TcpProxy(("127.0.0.1", port))
            self.proxy.plug()
            self.broker = ChildProcess(
                [
                    str(tansu_binary()),
                    "broker",
                    "--storage-engine=memory://tansu/",
                    f"--listener-url=tcp://127.0.0.1:{port}",
                    f"--advertised-listener-url=tcp://127.0.0.1:{self.proxy.port}",
                ],
                workdir / "tansu.log",
            )
            wait_until(lambda: _answers(port), timeout=20, what=f"the broker on port {port}")
            self.bootstrap = f"127.0.0.1:{self.proxy.port}"

    def sink(self) -> Sink:
        config = {
            "bootstrap-servers": self.bootstrap,
            "prefix": self.db,
            "delivery-timeout": "1s",
            "resolved-interval": "100ms",
        }
        return KafkaSink(config, self.workdir)

    def break_(self) -> None:
        assert self.proxy is not None, "a kafka target made without faults"
        unplug(self.proxy)

    def heal(self) -> None:
        assert self.proxy is not None
        plug(self.proxy)

    def check(self, workload: Workload, position: int) -> None:
        replica = self.scratch_dir() / "replica"
        applier = Applier(sink_for(f"sqlite://{replica}"))
        reader = ChangeReader(self.bootstrap, prefix=self.db, from_beginning=True, decode_keys=False)
        try:
            summary = run_apply(reader, applier, Limits(position, HANG_GUARD, None))
        finally:
            applier.close()
            reader.close()
        assert summary.released_ts >= position, summary.line()
        assert_sql_equal(workload, position, f"sqlite://{replica}?database={self.db}", self.scratch_dir())

    def cleanup(self) -> None:
        if self.proxy is not None:
            self.proxy.unplug()
        if self.broker is not None:
            self.broker.kill()


class SQLiteTarget(Target):
    name = "sqlite"

    def __init__(self, workdir: Path, db: str) -> None:
        super().__init__(workdir, db)
        self.path = workdir / "sqlite"
        self._blocker: sqlite3.Connection | None = None

    def sink(self) -> Sink:
        return SQLiteSink({"path": str(self.path), "busy-timeout": "50ms"}, self.workdir)

    def break_(self) -> None:
        """Another connection holds the sink's own file exclusively: reads and writes are busy."""
        self.path.mkdir(parents=True, exist_ok=True)
        blocker = sqlite3.connect(self.path / "_bridge.sqlite", isolation_level=None, timeout=10)
        blocker.execute("BEGIN EXCLUSIVE")
        self._blocker = blocker

    def heal(self) -> None:
        blocker, self._blocker = self._blocker, None
        if blocker is not None:
            blocker.execute("ROLLBACK")
            blocker.close()

    def check(self, workload: Workload, position: int) -> None:
        downstream = f"sqlite://{self.path}?database={self.db}"
        assert_sql_equal(workload, position, downstream, self.scratch_dir())

    def local_paths(self) -> list[Path]:
        return [self.path]

    def cleanup(self) -> None:
        self.heal()


class FileTarget(Target):
    name = "file"
    fails_open = False  # opening reads and truncates local files; nothing there fails retriably

    def __init__(self, workdir: Path, db: str) -> None:
        super().__init__(workdir, db)
        self.path = workdir / "files"
        self._taken: list[Path] = []

    def sink(self) -> Sink:
        return FileSink({"path": str(self.path), "max-file-size": 4096}, self.workdir)

    def break_(self) -> None:
        """The names of the next files are taken (by directories): the next rotation fails."""
        self.path.mkdir(parents=True, exist_ok=True)
        last = max((index for index, _ in list_files(self.path)), default=0)
        for index in range(last + 1, last + 40):
            taken = self.path / file_name(index)
            taken.mkdir()
            self._taken.append(taken)

    def heal(self) -> None:
        for taken in self._taken:
            taken.rmdir()
        self._taken = []

    def check(self, workload: Workload, position: int) -> None:
        replica = self.scratch_dir() / "replica"
        replay(self.path, SQLiteSink({"path": str(replica)}, replica), stop_ts=position)
        assert_sql_equal(workload, position, f"sqlite://{replica}?database={self.db}", self.scratch_dir())

    def local_paths(self) -> list[Path]:
        return [self.path]

    def cleanup(self) -> None:
        self.heal()


class FanOutTarget(Target):
    """A fan-out of a file and a sqlite sink; its faults are the sqlite member's."""

    name = "fanout"

    def __init__(self, workdir: Path, db: str) -> None:
        super().__init__(workdir, db)
        self.members = [FileTarget(workdir / "file", db), SQLiteTarget(workdir / "sqlite", db)]

    def sink(self) -> Sink:
        return FanOutSink([member.sink() for member in self.members])

    def break_(self) -> None:
        self.members[1].break_()

    def heal(self) -> None:
        self.members[1].heal()

    def check(self, workload: Workload, position: int) -> None:
        for member in self.members:
            member.check(workload, position)

    def local_paths(self) -> list[Path]:
        return [path for member in self.members for path in member.local_paths()]

    def cleanup(self) -> None:
        for member in self.members:
            member.cleanup()


NAMES = ("mysql", "kafka", "redis", "sqlite", "file", "fanout")


def make_target(name: str, workdir: Path, db: str, kafka_bootstrap: str, faults: bool) -> Target:
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "kafka":
        return KafkaTarget(workdir, db, kafka_bootstrap, faults)
    kinds: dict[str, Any] = {
        "mysql": MySQLTarget,
        "redis": RedisTarget,
        "sqlite": SQLiteTarget,
        "file": FileTarget,
        "fanout": FanOutTarget,
    }
    return kinds[name](workdir, db)


def partner_of(target: Target, workdir: Path) -> Target:
    """The other member of a fan-out with ``target``: a file sink, or a sqlite one beside a file sink."""
    if isinstance(target, FileTarget):
        return SQLiteTarget(workdir / "partner", target.db)
    return FileTarget(workdir / "partner", target.db)


def descriptors_into(paths: list[Path]) -> list[str]:
    """This process's open file descriptors that point under ``paths``."""
    found = []
    roots = [str(path.resolve()) + "/" for path in paths]
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if any(target.startswith(root) for root in roots):
                found.append(target)
    return found


def unplug(proxy: TcpProxy) -> None:
    proxy.unplug()


def plug(proxy: TcpProxy) -> None:
    """Plug ``proxy`` in unless it is (a fault heals once, whoever notices first)."""
    if not proxy.plugged:
        proxy.plug()


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
