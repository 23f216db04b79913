"""A private ``redis-server`` (its own port and dir) for tests that stop, kill or restart it,
and row-change events built by hand for driving the redis sink without a drainer."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bridge.proto import row_pb2
from bridge.sink.events import DDLEvent, RowChange, TxnEvent
from tests.support.process import ChildProcess, free_port, wait_until


class RedisServer:
    """``redis-server`` as a child process on a fixed port across restarts. ``persistent``: an
    append-only file fsynced on every write, so a stop and start keeps the keys."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        persistent: bool = False,
        tls: tuple[Path, Path] | None = None,
        password: str = "",
        unix_socket: Path | None = None,
    ) -> None:
        """``tls``: (certificate, key) — TLS only, the certificate also the CA clients must present
        a certificate of; ``password``: requirepass; ``unix_socket``: also listen there."""
        self.workdir = workdir
        self.port = port or free_port()
        self.persistent = persistent
        self.tls = tls
        self.password = password
        self.unix_socket = unix_socket
        self.child: ChildProcess | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        aof = ["yes", "--appendfsync", "always"] if self.persistent else ["no"]
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            cert, key = self.tls
            ports = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(cert),
                "--tls-key-file",
                str(key),
                "--tls-ca-cert-file",
                str(cert),
                "--tls-auth-clients",
                "yes",
            ]
        auth = ["--requirepass", self.password] if self.password else []
        if self.unix_socket is not None:
            auth += ["--unixsocket", str(self.unix_socket)]
        argv = [binary, "--bind", "127.0.0.1", *ports, *auth, "--save", "", "--appendonly", *aof,
                "--dir", str(self.workdir)]  # fmt: skip
        self.child = ChildProcess(argv, self.workdir / f"redis.{self.starts}.log")
        self.child.wait_for_line(r"Ready to accept connections", timeout=30)
        wait_until(lambda: self.client().ping(), timeout=30, what=f"redis-server on port {self.port}")

    def start_if_down(self) -> None:
        if self.child is None:
            self.start()

    def stop(self) -> None:
        """SIGTERM: the server closes its connections and exits (the append-only file kept)."""
        if self.child is not None:
            self.child.stop(timeout=30)
            self.child = None

    def kill(self) -> None:
        """SIGKILL: connections drop at once (without ``persistent``, the keys are lost)."""
        if self.child is not None:
            self.child.kill()
            self.child.stop()
            self.child = None

    def client(self) -> redis.Redis:
        tls: dict[str, Any] = {}
        if self.tls is not None:
            cert, key = self.tls
            tls = {"ssl": True, "ssl_ca_certs": str(cert), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        password = self.password or None
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10, password=password, **tls)


_TS = itertools.count(1_000_000)


def next_ts() -> int:
    """An increasing timestamp for hand-built events (one test process)."""
    return next(_TS) << 18


def txn(commit_ts: int, changes: Sequence[RowChange]) -> TxnEvent:
    rows = list(changes)
    return TxnEvent(commit_ts - 1, commit_ts, b"", lambda: iter(rows), len(rows))


def insert(table: row_pb2.TableSchema, *after: object) -> RowChange:
    return RowChange("insert", table, None, tuple(after))


def update(table: row_pb2.TableSchema, before: Sequence[object], after: Sequence[object]) -> RowChange:
    return RowChange("update", table, tuple(before), tuple(after))


def delete(table: row_pb2.TableSchema, *before: object) -> RowChange:
    return RowChange("delete", table, tuple(before), None)


def ddl(
    commit_ts: int,
    kind: row_pb2.SchemaChange.Kind,
    before: row_pb2.TableSchema | None,
    after: row_pb2.TableSchema | None,
    query: str = "",
) -> DDLEvent:
    named = after if after is not None else before
    assert named is not None
    change = row_pb2.SchemaChange(kind=kind, db=named.db, table=named.table)
    if after is not None:
        change.table_schema.CopyFrom(after)
    return DDLEvent(
        commit_ts - 1, commit_ts, b"", query or f"DDL {kind} {named.table}", change, before, after
    )


def stream_entries(answer: object) -> list[tuple[str, dict[str, str]]]:
    """The entries of an XRANGE answer (or of one stream in an XREAD answer) as text, whether
    the client decodes responses or not."""
    assert isinstance(answer, list), answer
    return [(text(entry_id), {text(k): text(v) for k, v in fields.items()}) for entry_id, fields in answer]


def text(value: object) -> str:
    """A Redis reply of a decoding client (str) or of a plain one (bytes), as str."""
    if isinstance(value, bytes):
        return value.decode()
    assert isinstance(value, str), value
    return value
