"""`binlog-bridge load` end to end: a real meta service and two real pumps, both upstreams.

After each run the pumps' committed binlogs are pulled, merged by commit_ts and replayed into an
in-memory model: DDL binlogs set each table's schema, and every row change must decode with the
schema then in effect and find the row as its before image says (so images and commit order
agree with what the upstream did). The model must end equal to the upstream tables, and the
counts equal to the load's JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge import binlog as B
from bridge.dsn import Dsn, parse_dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.proto import row_pb2
from bridge.pumpclient import PumpsClient
from bridge.rowcodec import RowCodec
from tests.integration.test_producer_writer import admin, dsn_text, server_dsn
from tests.support.process import ChildProcess, bridge_cli
from tests.support.pump_server import PumpProcess, pull_until, start_meta

pytestmark = [pytest.mark.timeout(240)]
Kind = row_pb2.SchemaChange.Kind
LOAD_FLAGS = ["--concurrency", "3", "--ddl-interval", "0.3", "--large-size", "60", "--accounts", "20"]
LOAD_FLAGS += ["--mix", "large=3", "--seed", "5", "--progress-interval", "0.5"]


@dataclass
class Cluster:
    meta: ChildProcess
    meta_addr: str
    pumps: list[PumpProcess]

    def now(self) -> int:
        with PumpsClient(self.meta_addr) as client:
            return client.get_timestamp()

    def pull_committed(self, client: PumpsClient, since: int) -> list[B.Binlog]:
        """The transactions committed on any pump that started after ``since``, by commit_ts.

        The pumps are shared by the module's tests, which run one after another.
        """
        until = client.get_timestamp()

        async def pull_all() -> list[B.Binlog]:
            pulled = await asyncio.gather(*(pull_until(p.addr, client.cluster_id, until) for p in self.pumps))
            return [txn for one in pulled for txn in one.txns if txn.start_ts > since]

        return sorted(asyncio.run(pull_all()), key=lambda b: b.commit_ts)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("load")
    meta, meta_addr = start_meta(workdir)
    pumps = [PumpProcess(workdir, meta_addr, node_id=f"pump-{n}") for n in (1, 2)]
    try:
        for pump in pumps:
            pump.start()
        yield Cluster(meta, meta_addr, pumps)
    finally:
        for pump in pumps:
            if pump.child is not None:
                pump.stop()
        meta.stop()


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def upstream(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[Dsn]:
    """A SQLite file, or a MariaDB database that `load` creates itself (dropped afterwards)."""
    if request.param == "sqlite":
        yield parse_dsn(f"sqlite://{tmp_path / 'load.db'}")
        return
    dsn = server_dsn()
    try:
        yield dsn.with_database(unique_name)
    finally:
        conn = admin(dsn)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


@dataclass
class Model:
    """Tables rebuilt from binlogs: rows by key (or counted, without a key), per table id."""

    schemas: dict[int, row_pb2.TableSchema] = field(default_factory=dict)
    keyed: dict[int, dict[tuple[Any, ...], dict[int, Any]]] = field(default_factory=dict)
    keyless: dict[int, Counter[tuple[tuple[int, Any], ...]]] = field(default_factory=dict)
    dml: int = 0
    rows: int = 0
    ddl: int = 0

    def apply(self, binlog: B.Binlog) -> None:
        if B.is_ddl(binlog):
            self.ddl += 1
            change = B.read_schema_change(binlog)
            assert change is not None
            if change.kind == Kind.DROP_TABLE:
                (table_id,) = [i for i, s in self.schemas.items() if s.table == change.table]
                del self.schemas[table_id]
            else:
                self.schemas[change.table_schema.table_id] = change.table_schema
                self._reshape(change.table_schema)
            return
        self.dml += 1
        for mutation in B.read_prewrite_value(binlog).mutations:
            self._apply_mutation(mutation)

    def _reshape(self, schema: row_pb2.TableSchema) -> None:
        """Rows kept across a schema change: dropped columns go, added ones are NULL."""
        ids = [c.id for c in schema.columns]
        table_id = schema.table_id
        if table_id in self.keyed:
            self.keyed[table_id] = {
                k: {i: row.get(i) for i in ids} for k, row in self.keyed[table_id].items()
            }
        if table_id in self.keyless:
            reshaped: Counter[tuple[tuple[int, Any], ...]] = Counter()
            for frozen, n in self.keyless[table_id].items():
                reshaped[_frozen({i: dict(frozen).get(i) for i in ids})] += n
            self.keyless[table_id] = +reshaped

    def _apply_mutation(self, mutation: Any) -> None:
        schema = self.schemas[mutation.table_id]
        codec = RowCodec(schema)
        key = [c.id for c in schema.columns if c.name in _key_names(schema)]
        for change in B.iter_changes(mutation):
            self.rows += 1
            before = _by_id(schema, codec, change.before)
            after = _by_id(schema, codec, change.after)
            if key:
                rows = self.keyed.setdefault(mutation.table_id, {})
                if before is not None:
                    assert rows.pop(tuple(before[i] for i in key)) == before, (
                        f"stale before image in {schema.table}"
                    )
                if after is not None:
                    assert rows.setdefault(tuple(after[i] for i in key), after) is after, (
                        "insert over a live key"
                    )
            else:
                counted = self.keyless.setdefault(mutation.table_id, Counter())
                if before is not None:
                    assert counted[_frozen(before)] > 0, f"a {schema.table} row changed that was not there"
                    counted[_frozen(before)] -= 1
                if after is not None:
                    counted[_frozen(after)] += 1

    def table(self, table_id: int) -> Counter[tuple[Any, ...]]:
        """A live table's rows as tuples in its current column order."""
        ids = [c.id for c in self.schemas[table_id].columns]
        rows: Counter[tuple[Any, ...]] = Counter()
        for frozen, n in self.keyless.get(table_id, Counter()).items():
            rows[tuple(dict(frozen)[i] for i in ids)] += n
        for row in self.keyed.get(table_id, {}).values():
            rows[tuple(row[i] for i in ids)] += 1
        return +rows


def _key_names(schema: row_pb2.TableSchema) -> list[str]:
    primary = [i for i in schema.indexes if i.primary]
    return list(primary[0].columns) if primary else []


def _by_id(schema: row_pb2.TableSchema, codec: RowCodec, image: bytes | None) -> dict[int, Any] | None:
    if image is None:
        return None
    return dict(zip((c.id for c in schema.columns), codec.decode(image), strict=True))


def _frozen(row: dict[int, Any]) -> tuple[tuple[int, Any], ...]:
    return tuple(sorted(row.items()))


def upstream_tables(writer: TxnWriter) -> dict[int, Counter[tuple[Any, ...]]]:
    """Every live table's rows as the upstream holds them, normalized through the row codec."""
    out = {}
    with writer.pool.session() as session:
        for name in writer.tables():
            entry = writer.catalog.use(session, name)
            q = session.dialect.quote
            sql = f"SELECT {', '.join(q(n) for n in entry.names)} FROM {q(name)}"
            rows = [entry.codec.decode(entry.codec.encode(entry.codec_values(r))) for r in session.query(sql)]
            out[entry.table_id] = Counter(rows)
    return out


def check_replay(cluster: Cluster, upstream: Dsn, summary: dict[str, Any], since: int) -> Model:
    with PumpsClient(cluster.meta_addr) as client:
        model = Model()
        for binlog in cluster.pull_committed(client, since):
            model.apply(binlog)
        writer = TxnWriter(open_upstream(upstream), client)
        try:
            actual = upstream_tables(writer)
        finally:
            writer.close()
    assert (model.dml, model.rows, model.ddl) == (summary["transactions"], summary["rows"], summary["ddl"])
    assert set(actual) == set(model.schemas)
    for table_id, rows in actual.items():
        assert model.table(table_id) == rows, (
            f"table {model.schemas[table_id].table} differs from its binlogs"
        )
    return model


def run_load(cluster: Cluster, upstream: Dsn, log: Path, *flags: str) -> ChildProcess:
    argv = bridge_cli(
        "load", "--meta", cluster.meta_addr, "--upstream", dsn_text(upstream), *LOAD_FLAGS, *flags
    )
    return ChildProcess(argv, log)


def summary_of(child: ChildProcess) -> dict[str, Any]:
    lines = [line for line in child.output.splitlines() if line.startswith("{")]
    assert len(lines) == 1, child.output
    return dict(json.loads(lines[0]))


def test_load_runs_and_its_binlogs_rebuild_the_upstream(
    cluster: Cluster, upstream: Dsn, tmp_path: Path
) -> None:
    since = cluster.now()
    child = run_load(cluster, upstream, tmp_path / "load.out", "--seconds", "3")
    assert child.wait(timeout=120) == 0, child.output
    summary = summary_of(child)
    assert summary["upstream"] == upstream.scheme and summary["errors"] == 0
    assert summary["transactions"] > 20 and summary["rows"] > summary["transactions"]
    assert summary["ddl"] >= 6  # five tables and an index, then the changes during the run
    assert summary["txn_per_s"] > 0 and summary["rows_per_s"] > 0
    assert "txn/s" in child.output and "rows/s" in child.output
    model = check_replay(cluster, upstream, summary, since)
    names = {s.table for s in model.schemas.values()}
    assert {"load_accounts", "load_orders", "load_events", "load_docs", "load_wide", "load_slots"} <= names


def test_sigint_stops_cleanly_and_a_second_run_continues(cluster: Cluster, tmp_path: Path) -> None:
    upstream = parse_dsn(f"sqlite://{tmp_path / 'again.db'}")
    since = cluster.now()
    child = run_load(cluster, upstream, tmp_path / "load-1.out", "--seconds", "600")
    child.wait_for_line(r"load .* txns [1-9]", timeout=60)
    child.proc.send_signal(signal.SIGINT)
    assert child.wait(timeout=60) == 0, child.output
    first = summary_of(child)
    assert first["elapsed"] < 600 and first["errors"] == 0

    again = run_load(cluster, upstream, tmp_path / "load-2.out", "--seconds", "1", "--seed", "6")
    assert again.wait(timeout=120) == 0, again.output
    second = summary_of(again)
    total = {k: first[k] + second[k] for k in ("transactions", "rows", "ddl")}
    check_replay(cluster, upstream, total, since)
