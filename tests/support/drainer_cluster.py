"""Real `binlog-bridge drainer` children for drainer tests, and a producer that writes
transactions through the real pump client with the binlog builders and RowCodec.

The meta service and pumps come from :mod:`tests.support.pump_server`.
"""

from __future__ import annotations

import itertools
import json
import os
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.binlog import TableMutationBuilder, commit, ddl_prewrite, prewrite
from bridge.proto import row_pb2
from bridge.pumpclient import PumpClientConfig, PumpsClient
from bridge.rowcodec import RowCodec
from tests.support.process import ChildProcess, bridge_cli, free_port, wait_until
from tests.support.recording_sink import SINK_TYPE, read_records

ROOT = Path(__file__).resolve().parents[2]

DRAINER_TOML = """\
addr = "127.0.0.1:{port}"
node-id = "{node_id}"
meta = "{meta}"
data-dir = "{data_dir}"
status-addr = "127.0.0.1:{status_port}"
heartbeat-interval = "200ms"
flush-interval = "100ms"
checkpoint-interval = "200ms"
resolved-interval = "100ms"
{extra}

[sink]
type = {sink_type}
{sink_tables}
"""

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


@dataclass
class DrainerProcess:
    """One `binlog-bridge drainer` child with a fixed node id, ports and data dir across restarts."""

    workdir: Path
    meta_addr: str
    node_id: str = "drainer-1"
    sink_type: str = json.dumps(SINK_TYPE)  # a TOML value: "sqlite", ["sqlite", "file"], ...
    sink_tables: str = ""
    extra_config: str = ""
    port: int = field(default_factory=free_port)
    status_port: int = field(default_factory=free_port)
    child: ChildProcess | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / self.node_id

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.node_id}.toml"

    def write_config(self) -> None:
        self.config_path.write_text(
            DRAINER_TOML.format(
                port=self.port,
                node_id=self.node_id,
                meta=self.meta_addr,
                data_dir=self.data_dir,
                status_port=self.status_port,
                extra=self.extra_config,
                sink_type=self.sink_type,
                sink_tables=self.sink_tables,
            )
        )

    def launch(self, *flags: str) -> ChildProcess:
        """Start the child without waiting for it to be ready."""
        self.write_config()
        self.starts += 1
        log_path = self.workdir / f"{self.node_id}.{self.starts}.out"
        env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.child = ChildProcess(
            bridge_cli("drainer", "--config", str(self.config_path), *flags), log_path, env
        )
        return self.child

    def start(self, *flags: str, timeout: float = 60.0) -> ChildProcess:
        child = self.launch(*flags)
        child.wait_for_line(r"drainer ready: node_id=", timeout=timeout)
        return child

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop(timeout=60)

    @property
    def output(self) -> str:
        return self.child.output if self.child is not None else ""

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}/status", timeout=10) as reply:
            return dict(json.loads(reply.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.data_dir)

    def checkpoint(self) -> dict[str, Any]:
        return dict(json.loads((self.data_dir / "checkpoint.json").read_text()))

    def wait_checkpoint(self, commit_ts: int, timeout: float = 60.0) -> None:
        """Wait until the checkpoint file passes ``commit_ts`` (a hang guard, not a time bound)."""
        wait_until(
            lambda: (
                (self.data_dir / "checkpoint.json").exists() and self.checkpoint()["commitTS"] >= commit_ts
            ),
            timeout=timeout,
            what=f"{self.node_id}'s checkpoint to reach {commit_ts}; output:\n{self.output[-3000:]}",
        )


def table(
    name: str, table_id: int, db: str = "shop", extra: Sequence[row_pb2.Column] = ()
) -> row_pb2.TableSchema:
    """``(id BIGINT primary key, name VARCHAR(64) NULL, ...extra)``."""
    schema = row_pb2.TableSchema(table_id=table_id, db=db, table=name)
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="name", type=T.VARCHAR, length=64, nullable=True)
    schema.columns.extend(extra)
    schema.max_column_id = max(c.id for c in schema.columns)
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


@dataclass
class Written:
    """What the producer committed: one entry per transaction, in the order written."""

    commit_ts: int
    start_ts: int
    kind: str  # "txn" or "ddl"
    changes: list[dict[str, Any]]


class Producer:
    """Writes DDL and DML transactions to the pumps through the real pump client (sync API)."""

    def __init__(self, meta_addr: str, strategy: str = "range", chunk_bytes: int | None = None) -> None:
        """``chunk_bytes``: the client's chunk-bytes (None: its default)."""
        config = PumpClientConfig(strategy=strategy, write_timeout=30.0)  # type: ignore[arg-type]
        if chunk_bytes is not None:
            config.chunk_bytes = chunk_bytes
        self.client = PumpsClient(meta_addr, config)
        self.client.start()
        self.schemas: dict[str, row_pb2.TableSchema] = {}
        self.written: list[Written] = []
        self._jobs = itertools.count(1)

    def close(self) -> None:
        self.client.close()

    def ddl(self, change: row_pb2.SchemaChange, query: str) -> Written:
        start_ts = self.client.get_timestamp()
        self.client.write_binlog(ddl_prewrite(start_ts, query, next(self._jobs), change))
        commit_ts = self.client.get_timestamp()
        self.client.write_binlog(commit(start_ts, commit_ts))
        if change.HasField("table_schema"):
            schema = row_pb2.TableSchema()
            schema.CopyFrom(change.table_schema)
            self.schemas[change.table] = schema
        written = Written(commit_ts, start_ts, "ddl", [])
        self.written.append(written)
        return written

    def create(self, schema: row_pb2.TableSchema) -> Written:
        change = Change(kind=Change.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema)
        return self.ddl(change, f"CREATE TABLE {schema.db}.{schema.table} (...)")

    def alter(self, schema: row_pb2.TableSchema) -> Written:
        change = Change(kind=Change.ALTER_TABLE, db=schema.db, table=schema.table, table_schema=schema)
        return self.ddl(change, f"ALTER TABLE {schema.db}.{schema.table} ...")

    def txn(
        self, changes: Sequence[tuple[str, str, Sequence[object] | None, Sequence[object] | None]]
    ) -> Written:
        """One transaction of ``(kind, table, before, after)`` changes, in order."""
        builders: dict[str, TableMutationBuilder] = {}
        records: list[dict[str, Any]] = []
        for kind, name, before, after in changes:
            schema = self.schemas[name]
            codec = RowCodec(schema)
            mutation = builders.setdefault(name, TableMutationBuilder(schema.table_id))
            if kind == "insert":
                mutation.insert(codec.encode(after or ()))
            elif kind == "update":
                mutation.update(*codec.encode_update(before or (), after or ()))
            else:
                mutation.delete(codec.encode(before or ()))
            records.append(
                {
                    "kind": kind,
                    "table": f"{schema.db}.{name}",
                    "before": None if before is None else list(before),
                    "after": None if after is None else list(after),
                }
            )
        start_ts = self.client.get_timestamp()
        self.client.write_binlog(
            prewrite(start_ts, [b.build() for b in builders.values()], b"k%d" % start_ts)
        )
        commit_ts = self.client.get_timestamp()
        self.client.write_binlog(commit(start_ts, commit_ts))
        # A binlog keeps the order within each table (TableMutation.sequence), tables in first-use order.
        order = list(builders)
        records.sort(key=lambda r: order.index(r["table"].split(".", 1)[1]))
        written = Written(commit_ts, start_ts, "txn", records)
        self.written.append(written)
        return written


def delivered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The txn and ddl records, a re-delivered commit_ts kept once (its first delivery)."""
    seen: set[int] = set()
    out = []
    for record in records:
        if record["type"] in ("resolved", "open") or record["commit_ts"] in seen:
            continue
        seen.add(record["commit_ts"])
        out.append(record)
    return out


def expected_records(written: Sequence[Written]) -> list[dict[str, Any]]:
    """What the recording sink should hold for ``written``, in commit_ts order."""
    out = []
    for w in sorted(written, key=lambda w: w.commit_ts):
        record: dict[str, Any] = {"type": w.kind, "commit_ts": w.commit_ts, "start_ts": w.start_ts}
        if w.kind == "txn":
            record["changes"] = w.changes
        out.append(record)
    return out


def check_runs(records: list[dict[str, Any]]) -> list[int]:
    """Each run of the sink (from one open to the next) got strictly increasing commit_ts,
    all above the position it was opened at; returns those positions."""
    opened: list[int] = []
    last = -1
    for record in records:
        if record["type"] == "open":
            opened.append(record["commit_ts"])
            last = record["commit_ts"]
            continue
        assert record["commit_ts"] > last, f"{record['type']} at {record['commit_ts']} after {last}"
        last = record["commit_ts"] if record["type"] != "resolved" else max(last, record["commit_ts"])
    return opened


def strip_ddl_details(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("query", "table")} for r in records]
