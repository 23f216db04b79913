"""SIGTERM stops every process promptly, leaving its checkpoint at the last durable position
(issue 15, item 5).

A drainer whose MySQL checkpoint target became unreachable keeps retrying the save (up to
``retry-timeout``, a minute by default); SIGTERM must end that at once. The downstream MariaDB
is the shared one behind a :class:`~tests.support.tcp_proxy.TcpProxy` the test unplugs (the
drainer sees refused connections). After SIGTERM the checkpoint row is the last one saved,
a restart with the target back resumes from it, and the sink ends up with every transaction.
The pump and the meta service are stopped with SIGTERM too. Each stop is timed and logged;
the timeouts are hang guards, not assertions on speed. Run time: ~5 s.

The fault suite (tests/e2e/test_faults_*.py, 7 cases, all @pytest.mark.slow) ran in 69 s
on a 2-core machine (up to ~2 min while other work shared it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import mysql
from bridge.dsn import parse_dsn
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import ChildProcess, wait_until
from tests.support.pump_server import PumpProcess, start_meta
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.mysql, pytest.mark.timeout(240)]
log = logging.getLogger(__name__)

DSN = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
HANG_GUARD = 30.0  # seconds a stop may take before the test calls it hung (not a speed bound)


def checkpoint_row(schema: str) -> int | None:
    conn = mysql.connect(DSN, database=None, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT commit_ts FROM `{schema}`.`checkpoint`")
            row = cursor.fetchone()
        return None if row is None else int(row[0])
    finally:
        conn.close()


def drop_schema(schema: str) -> None:
    conn = mysql.connect(DSN, database=None, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    finally:
        conn.close()


def timed_sigterm(child: ChildProcess, what: str) -> int:
    """SIGTERM ``child`` and wait for it (hang guard); logs how long it took, returns its exit status."""
    began = time.monotonic()
    child.proc.terminate()
    rc = child.wait(timeout=HANG_GUARD)
    took = time.monotonic() - began
    log.warning("%s exited %d %.2fs after SIGTERM", what, rc, took)
    return rc


@pytest.fixture
def schema(unique_name: str) -> Iterator[str]:
    yield unique_name
    drop_schema(unique_name)


def test_sigterm_ends_a_checkpoint_save_retrying_against_an_unreachable_target(
    tmp_path: Path, schema: str
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    pump.start()
    with TcpProxy((DSN.host, DSN.port)) as proxy:
        drainer = DrainerProcess(
            tmp_path,
            meta_addr,
            extra_config=(
                f'[checkpoint]\ntype = "mysql"\ndsn = "mysql://{DSN.user}@127.0.0.1:{proxy.port}/"\n'
                f'schema = "{schema}"\nconnect-timeout = "1s"\n'
            ),
        )
        drainer.start()
        producer = Producer(meta_addr)
        try:
            producer.create(table("orders", 1))
            for i in range(20):
                producer.txn([("insert", "orders", None, [i, f"row {i}"])])
            saved = producer.written[-1].commit_ts
            wait_until(lambda: (checkpoint_row(schema) or 0) >= saved, what="the checkpoint row", timeout=60)

            proxy.unplug()  # MariaDB stays up; the drainer can no longer reach it
            for i in range(20, 30):
                producer.txn([("insert", "orders", None, [i, f"row {i}"])])
            drainer.child.wait_for_line(r"checkpoint .*: save failed .*retrying in", timeout=60)  # type: ignore[union-attr]
            durable = checkpoint_row(schema)

            rc = timed_sigterm(drainer.child, "drainer retrying its checkpoint")  # type: ignore[arg-type]
            assert "failed while stopping (not retried)" in drainer.output
            assert rc == 1, drainer.output[-3000:]  # it says it could not save the checkpoint
            assert checkpoint_row(schema) == durable  # the last position saved, nothing invented

            proxy.plug()
            drainer.start()  # resumes from that row and delivers the rest
            last = producer.written[-1].commit_ts
            wait_until(lambda: (checkpoint_row(schema) or 0) >= last, what="the checkpoint after the restart")
            assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)

            rc = timed_sigterm(drainer.child, "drainer")  # type: ignore[arg-type]
            assert rc == 0 and (checkpoint_row(schema) or 0) >= last
        finally:
            producer.close()
            drainer.kill()
    for child, what in ((pump.child, "pump"), (meta, "meta service")):
        assert child is not None
        rc = timed_sigterm(child, what)
        assert rc == 0, child.output[-3000:]
