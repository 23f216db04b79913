"""A binlog-enabled MariaDB source, `binlog-bridge capture` children, and the checks on what they wrote.

- :class:`CaptureProcess` — one ``binlog-bridge capture`` child with a fixed data dir and
  status port across restarts;
- :func:`source_rows` — a source table's rows as the SQL producer would read them
  (described with its code, values through its adapters, normalised by the row codec);
- :func:`replay` — the pumps' committed binlogs, applied in commit_ts order to an in-memory
  model (:class:`tests.integration.test_load.Model`, which also refuses an insert over a live
  key and a stale before image, so a transaction delivered twice fails the check).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge import binlog as B
from bridge.dsn import parse_dsn
from bridge.producer.mysql import MySQLUpstream
from bridge.pumpclient import PumpsClient
from bridge.rowcodec import RowCodec
from tests.integration.test_load import Model
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import ChildProcess, bridge_cli, free_port, wait_until
from tests.support.pump_server import PumpProcess, pull_until

CAPTURE_TOML = """\
[capture]
upstream = "{upstream}"
meta = "{meta}"
data-dir = "{data_dir}"
server-id = {server_id}
databases = {databases}
snapshot = "{snapshot}"
snapshot-chunk = {chunk}
status-addr = "127.0.0.1:{status_port}"
heartbeat = "200ms"
{extra}
[pump-client]
strategy = "hash"
"""


@dataclass
class CaptureProcess:
    workdir: Path
    source: MariaDBInstance
    meta_addr: str
    databases: list[str]
    snapshot: str = "initial"
    chunk: int = 50
    extra: str = ""
    server_id: int = 4242
    upstream: str = ""  # default: root over TCP, TLS off
    status_port: int = field(default_factory=free_port)
    child: ChildProcess | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "capture"

    def launch(self) -> ChildProcess:
        config = self.workdir / "capture.toml"
        config.write_text(
            CAPTURE_TOML.format(
                upstream=self.upstream or f"mysql://root@127.0.0.1:{self.source.port}/?ssl-mode=disabled",
                meta=self.meta_addr,
                data_dir=self.data_dir,
                server_id=self.server_id,
                databases=json.dumps(self.databases),
                snapshot=self.snapshot,
                chunk=self.chunk,
                status_port=self.status_port,
                extra=self.extra,
            )
        )
        self.starts += 1
        self.child = ChildProcess(
            bridge_cli("capture", "--config", str(config)), self.workdir / f"capture.{self.starts}.out"
        )
        return self.child

    def start(self, timeout: float = 60.0) -> ChildProcess:
        child = self.launch()
        child.wait_for_line("capture streaming from", timeout=timeout)
        return child

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}{path}", timeout=10) as reply:
            return bytes(reply.read())

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self._get("/status")))

    def metrics(self) -> str:
        return self._get("/metrics").decode()

    def wait_caught_up(self, timeout: float = 120.0) -> None:
        """Until the capture's position is the source's binlog end (a hang guard, not a time bound)."""
        conn = self.source.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute("SHOW MASTER STATUS")
                row = cursor.fetchone()
                assert row is not None, "the source writes no binlog"
                file, offset = row[:2]
        finally:
            conn.close()

        def reached() -> bool:
            position = self.status().get("position") or {}
            return (position.get("file"), int(position.get("offset", 0))) >= (file, int(offset))

        try:
            wait_until(reached, timeout=timeout, what=f"the capture to reach {file}:{offset}")
        except AssertionError as exc:
            output = self.child.output[-3000:] if self.child else ""
            raise AssertionError(f"{exc}; capture output:\n{output}") from None

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop(timeout=60)

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()


def source_rows(source: MariaDBInstance, db: str, table: str) -> Counter[tuple[Any, ...]]:
    """The rows of ``db.table`` as the SQL producer reads them, normalised by the row codec."""
    upstream = MySQLUpstream(parse_dsn(f"mysql://root@127.0.0.1:{source.port}/{db}?ssl-mode=disabled"))
    session = upstream.connect()
    try:
        schema = upstream.describe_table(session, table)
        assert schema is not None, f"{db}.{table} does not exist"
        for n, column in enumerate(schema.columns, 1):
            column.id = n
        codec, adapters = RowCodec(schema), upstream.adapters(schema)
        q = session.dialect.quote
        rows = session.query(f"SELECT {', '.join(q(c.name) for c in schema.columns)} FROM {q(table)}")
        values = [
            [None if v is None else a.from_db(v) for v, a in zip(r, adapters, strict=True)] for r in rows
        ]
        return Counter(codec.decode(codec.encode(v)) for v in values)
    finally:
        session.close()


class CaptureModel(Model):
    """The load test's model, plus TRUNCATE (a restarted snapshot empties the tables it announced)."""

    def apply(self, binlog: B.Binlog) -> None:
        change = B.read_schema_change(binlog) if B.is_ddl(binlog) else None
        if change is not None and change.kind == change.TRUNCATE_TABLE:
            self.ddl += 1
            self.keyed.pop(change.table_schema.table_id, None)
            self.keyless.pop(change.table_schema.table_id, None)
            return
        super().apply(binlog)


def replay(meta_addr: str, pumps: list[PumpProcess], since: int = 0) -> tuple[Model, list[B.Binlog]]:
    """Every binlog of ``pumps`` committed after ``since`` until now, applied in commit_ts order."""
    with PumpsClient(meta_addr) as client:
        until, cluster_id = client.get_timestamp(), client.cluster_id

    async def pull_all() -> list[B.Binlog]:
        pulled = await asyncio.gather(*(pull_until(p.addr, cluster_id, until) for p in pumps))
        return [txn for one in pulled for txn in one.txns if txn.start_ts > since]

    binlogs = sorted(asyncio.run(pull_all()), key=lambda b: b.commit_ts)
    model = CaptureModel()
    for binlog in binlogs:
        model.apply(binlog)
    return model, binlogs


def model_rows(model: Model, db: str, table: str) -> Counter[tuple[Any, ...]]:
    """The model's rows of the live table ``db.table``."""
    ids = [i for i, s in model.schemas.items() if (s.db, s.table) == (db, table)]
    assert len(ids) == 1, f"{db}.{table}: {len(ids)} live schemas in the binlogs"
    return model.table(ids[0])
