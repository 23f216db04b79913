"""[[route]] and sink-side refusals through real `binlog-bridge meta`, `pump` and `drainer` children
with the MySQL sink on the real MariaDB (issue 18).

- a drainer with routes writes the upstream database ``U`` to ``U_b`` (a table renamed too), DML and
  DDL alike, and nothing to ``U``; the kafka sink names its topics from the routed names;
- ``on-error = "skip-and-log"``: rows for a table dropped downstream (error 1146) are stored in the
  dead-letter directory and logged; the rest arrives;
- ``on-error = "halt"``: a refused insert stops the drainer naming the one ``[skip]`` line that skips it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka.admin import AdminClient

from bridge.dsn import parse_dsn
from bridge.proto import row_pb2
from drainer.sinks.file.binlogfile import BinlogFileReader
from tests.support.drainer_cluster import DrainerProcess, Producer, table
from tests.support.process import run_cli
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = pytest.mark.timeout(240)

T = row_pb2.ColumnType
MYSQL_DSN = os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, Producer]]:
    """One meta service and one pump for the module; a producer writing to them."""
    workdir = tmp_path_factory.mktemp("route")
    meta, meta_addr = start_meta(workdir)
    pump = PumpProcess(workdir, meta_addr)
    pump.start()
    producer = Producer(meta_addr)
    try:
        yield workdir, meta_addr, producer
    finally:
        producer.close()
        pump.kill()
        meta.kill()


@pytest.fixture
def mysql() -> Iterator[Any]:
    dsn = parse_dsn(MYSQL_DSN)
    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user or "root", password=dsn.password or "", autocommit=True
    )
    yield conn
    conn.close()


def mysql_drainer(workdir: Path, meta_addr: str, node_id: str, db: str, extra: str) -> DrainerProcess:
    return DrainerProcess(
        workdir,
        meta_addr,
        node_id=node_id,
        sink_type='"mysql"',
        sink_tables=f'[sink.mysql]\ndsn = "{MYSQL_DSN}"\nprogress-schema = "{db}_progress"\n',
        extra_config=f'[filter]\ndo-db = ["{db}"]\n{extra}',
    )


def query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def databases(conn: Any, prefix: str) -> set[str]:
    return {row[0] for row in query(conn, "SHOW DATABASES") if row[0].startswith(prefix)}


def drop(conn: Any, *dbs: str) -> None:
    for db in dbs:
        query(conn, f"DROP DATABASE IF EXISTS `{db}`")


def test_routes_rename_the_database_and_a_table_for_dml_and_ddl(
    cluster: tuple[Path, str, Producer], mysql: Any, unique_name: str
) -> None:
    workdir, meta_addr, producer = cluster
    up = unique_name
    (workdir / "route").mkdir()
    routes = (
        f'[[route]]\nschema-pattern = "{up}"\ntable-pattern = "ord*"\ntarget-schema = "{{schema}}_b"\n'
        'target-table = "o_{table}"\n'
        f'[[route]]\nschema-pattern = "{up}"\ntarget-schema = "{up}_b"\n'
    )
    drainer = mysql_drainer(workdir / "route", meta_addr, "drainer-route", up, routes)
    try:
        drainer.start()
        producer.create(table("items", 1001, db=up))
        producer.create(table("orders", 1002, db=up))
        for i in range(3):
            producer.txn([("insert", "items", None, (i, f"i{i}")), ("insert", "orders", None, (i, f"o{i}"))])
        wider = table(
            "items", 1001, db=up, extra=[row_pb2.Column(id=3, name="note", type=T.TEXT, nullable=True)]
        )
        alter = producer.alter(wider)
        last = producer.txn(
            [("insert", "items", None, (9, "i9", "noted")), ("delete", "orders", (0, "o0"), None)]
        )
        drainer.wait_checkpoint(last.commit_ts)
        assert query(mysql, f"SELECT id, name, note FROM `{up}_b`.`items` ORDER BY id") == [
            (0, "i0", None),
            (1, "i1", None),
            (2, "i2", None),
            (9, "i9", "noted"),
        ]
        assert query(mysql, f"SELECT id, name FROM `{up}_b`.`o_orders` ORDER BY id") == [(1, "o1"), (2, "o2")]
        assert databases(mysql, up) == {f"{up}_b", f"{up}_progress"}  # nothing under the upstream name
        metrics = drainer.metrics()  # the sink's metrics (from its context's registry) in the drainer's
        assert f'bridge_sink_mysql_rows_total{{kind="insert",table="{up}_b.items"}} 4.0' in metrics
        assert 'bridge_sink_mysql_flushes_total{reason="ddl"}' in metrics
        assert drainer.stop() == 0
        logged = [
            line for line in drainer.output.splitlines() if f"DDL at commit_ts {alter.commit_ts}" in line
        ]
        assert len(logged) == 1, logged  # each DDL logged once
        assert f"ALTER TABLE `{up}_b`.`items`" in logged[0]  # as applied: under the routed name
    finally:
        drainer.kill()
        drop(mysql, f"{up}_b", f"{up}_progress")


@pytest.mark.kafka
def test_the_kafka_sink_names_topics_after_the_routed_names_and_its_topic_rules(
    cluster: tuple[Path, str, Producer], kafka_bootstrap: str, unique_name: str
) -> None:
    workdir, meta_addr, producer = cluster
    up = unique_name
    (workdir / f"{up}-kafka").mkdir()
    routes = (
        f'[[route]]\nschema-pattern = "{up}"\ntable-pattern = "it?ms"\ntarget-schema = "shop"\n'
        'target-table = "{schema}_{table}"\n'
    )
    topic_routes = (
        f'[[sink.kafka.topic-route]]\nschema-pattern = "{up}"\ntable-pattern = "ord*"\n'
        'topic = "{prefix}.by-rule.{table}"\n'
    )
    drainer = DrainerProcess(
        workdir / f"{up}-kafka",
        meta_addr,
        node_id="drainer-kafka",
        sink_type='"kafka"',
        sink_tables=f'[sink.kafka]\nbootstrap-servers = "{kafka_bootstrap}"\nprefix = "{up}"\n{topic_routes}',
        extra_config=f'[filter]\ndo-db = ["{up}"]\n{routes}',
    )
    try:
        drainer.start()
        producer.create(table("items", 3001, db=up))
        producer.create(table("orders", 3002, db=up))
        last = producer.txn([("insert", "items", None, (1, "one")), ("insert", "orders", None, (2, "two"))])
        drainer.wait_checkpoint(last.commit_ts)
        topics = set(AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics)
        assert {f"{up}.shop.{up}_items", f"{up}.by-rule.orders"} <= topics  # [[route]]; the topic rule
        assert not any(t.startswith(f"{up}.{up}.") for t in topics)  # nothing under the template's name
        metrics = drainer.metrics()  # the sink's metrics (from its context's registry) in the drainer's
        assert f'bridge_sink_kafka_messages_total{{kind="row",topic="{up}.by-rule.orders"}} 1.0' in metrics
        acked = re.search(r"^bridge_sink_kafka_acked_ts (\S+)$", metrics, re.MULTILINE)
        assert acked is not None and float(acked.group(1)) >= last.commit_ts
        assert drainer.stop() == 0
        read = run_cli(
            "consume", "--bootstrap-servers", kafka_bootstrap, "--topic", f"{up}.by-rule.orders",
            "--from-beginning", "--idle-timeout", "2",
        )  # fmt: skip
        assert read.returncode == 0, read.stderr
        (message,) = [json.loads(line) for line in read.stdout.splitlines()]
        assert message["source"]["db"] == up and message["source"]["table"] == "orders"  # names kept
    finally:
        drainer.kill()


@pytest.mark.slow  # a fault test: a table dropped under a running drainer, a second drainer halting
def test_refused_changes_skip_and_log_to_the_dead_letter_dir_or_halt_naming_the_skip_line(
    cluster: tuple[Path, str, Producer], mysql: Any, unique_name: str
) -> None:
    workdir, meta_addr, producer = cluster
    up = unique_name
    (workdir / up).mkdir()
    skipping = mysql_drainer(
        workdir / up,
        meta_addr,
        "drainer-skip",
        up,
        f'[skip]\non-error = "skip-and-log"\n[[route]]\nschema-pattern = "{up}"\ntarget-schema = "{up}_s"\n',
    )
    halting = mysql_drainer(
        workdir / up,
        meta_addr,
        "drainer-halt",
        up,
        f'[[route]]\nschema-pattern = "{up}"\ntarget-schema = "{up}_h"\n',
    )
    # drainer-halt's downstream has an items table without the name column: every insert is refused
    query(mysql, f"CREATE DATABASE `{up}_h`")
    query(mysql, f"CREATE TABLE `{up}_h`.`items` (id BIGINT PRIMARY KEY)")
    try:
        skipping.start()
        producer.create(table("items", 2001, db=up))
        producer.create(table("other", 2002, db=up))
        first = producer.txn([("insert", "items", None, (1, "kept"))])
        skipping.wait_checkpoint(first.commit_ts)
        query(mysql, f"DROP TABLE `{up}_s`.`items`")  # the downstream refuses from now on: error 1146
        refused = [producer.txn([("insert", "items", None, (i, f"r{i}"))]) for i in (2, 3)]
        last = producer.txn([("insert", "other", None, (7, "arrives"))])
        skipping.wait_checkpoint(last.commit_ts)
        assert query(mysql, f"SELECT id, name FROM `{up}_s`.`other`") == [(7, "arrives")]
        for written in refused:
            assert (
                f"the downstream refused the transaction at commit_ts {written.commit_ts}; skipped, stored in"
                in skipping.output
            )
        assert "1146" in skipping.output
        stored = [e.commit_ts for e in BinlogFileReader(skipping.data_dir / "dead-letter").events()]
        assert stored == [w.commit_ts for w in refused]
        assert skipping.stop() == 0

        halting.launch()
        assert halting.child is not None
        assert halting.child.wait(timeout=120) == 2  # a user error: the cure is in the config
        line = f"commit-ts = [[{first.commit_ts}, {first.commit_ts}]] under [skip]"
        assert f"the downstream refused the transaction at commit_ts {first.commit_ts}" in halting.output
        assert line in halting.output, halting.output[-3000:]
        assert halting.checkpoint()["commitTS"] < first.commit_ts
    finally:
        skipping.kill()
        halting.kill()
        drop(mysql, f"{up}_s", f"{up}_h", f"{up}_progress")
