"""The drainer under bad input, sink failures and pump state changes, with real
`binlog-bridge meta`, `pump` and `drainer` children.

Bad input stops the drainer with an error naming the commit_ts and the
``ignore-txn-commit-ts`` way out, the checkpoint below it, and registers it
``failed`` with that error (``ctl drainers``); restarting with that commit_ts
listed skips it (logged) and carries on, and a clean stop registers ``paused``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.binlog import TableMutationBuilder, commit, prewrite
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from drainer.sinks.file.binlogfile import BinlogFileReader
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    Written,
    check_runs,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import run_cli, wait_until
from tests.support.pump_server import PumpProcess
from tests.support.recording_sink import SINK_TYPE

pytestmark = pytest.mark.timeout(300)

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


@pytest.fixture
def producer(meta_addr: str) -> Iterator[Producer]:
    producer = Producer(meta_addr)
    yield producer
    producer.close()


def drainer_with(tmp_path: Path, meta_addr: str, sink_options: str = "", extra: str = "") -> DrainerProcess:
    tables = f'[sink."{SINK_TYPE}"]\n{sink_options}' if sink_options else ""
    return DrainerProcess(tmp_path, meta_addr, sink_tables=tables, extra_config=extra)


def write_raw_row(producer: Producer, schema: row_pb2.TableSchema, row: tuple[object, ...]) -> Written:
    """A one-row insert encoded with ``schema``, whatever the drainer tracks."""
    mutation = TableMutationBuilder(schema.table_id)
    mutation.insert(RowCodec(schema).encode(row))
    start_ts = producer.client.get_timestamp()
    producer.client.write_binlog(prewrite(start_ts, [mutation.build()]))
    commit_ts = producer.client.get_timestamp()
    producer.client.write_binlog(commit(start_ts, commit_ts))
    return Written(commit_ts, start_ts, "txn", [])


def write_misfit_row(producer: Producer) -> Written:
    """A transaction whose row carries a column the tracked schema of shop.users does not have."""
    wider = table("users", 10, extra=[row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)])
    return write_raw_row(producer, wider, (99, "bad", "b@d"))


def registered_drainer(meta_addr: str, node_id: str) -> dict[str, Any]:
    """The drainer's registry record as `ctl drainers --output json` shows it."""
    listed = run_cli("ctl", "--meta", meta_addr, "drainers", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    (node,) = [n for n in json.loads(listed.stdout) if n["node_id"] == node_id]
    return dict(node)


def start_with_users(drainer: DrainerProcess, producer: Producer, rows: int) -> None:
    """Start the drainer, create shop.users and insert ``rows`` rows, a transaction each."""
    drainer.start()
    producer.create(table("users", 10))
    inserts(producer, 0, rows)


def assert_delivered_without(drainer: DrainerProcess, producer: Producer, skipped: set[int]) -> None:
    """The sink holds every written transaction but those at ``skipped`` commit_ts, in order."""
    expected = [w for w in producer.written if w.commit_ts not in skipped]
    assert strip_ddl_details(delivered(drainer.records())) == expected_records(expected)


def more_rows_then_exit(drainer: DrainerProcess, producer: Producer) -> int:
    """Insert five more rows (behind the fault) and wait for the drainer to exit; its status."""
    inserts(producer, 100, 5)
    assert drainer.child is not None
    return drainer.child.wait(timeout=120)


def inserts(producer: Producer, start: int, count: int) -> None:
    for i in range(start, start + count):
        producer.txn([("insert", "users", None, (i, f"u{i}"))])


def test_a_row_that_does_not_fit_stops_the_drainer_until_skipped(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    try:
        start_with_users(drainer, producer, 10)
        good = list(producer.written)
        bad = write_misfit_row(producer)
        assert more_rows_then_exit(drainer, producer) == 1
        message = f"commit_ts {bad.commit_ts}: a row does not fit its schema"
        assert message in drainer.output and "unknown column id 3" in drainer.output
        assert f"add {bad.commit_ts} to [filter] ignore-txn-commit-ts" in drainer.output
        assert drainer.checkpoint()["commitTS"] < bad.commit_ts
        got = strip_ddl_details(delivered(drainer.records()))
        assert got == expected_records(good)[: len(got)]  # the sink failed in a batch: some of it unflushed

        drainer.extra_config = f"[filter]\nignore-txn-commit-ts = [{bad.commit_ts}]"
        drainer.start()
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert re.search(
            rf"skipping the transaction at commit_ts {bad.commit_ts} .*ignore-txn-commit-ts", drainer.output
        )
        assert_delivered_without(drainer, producer, {bad.commit_ts})
        check_runs(drainer.records())
    finally:
        drainer.kill()


def test_a_ddl_the_tracker_cannot_apply_stops_the_drainer(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    try:
        start_with_users(drainer, producer, 5)
        bad = producer.alter(table("ghosts", 12))
        assert more_rows_then_exit(drainer, producer) == 2  # a UserError: the operator decides
        assert f"cannot replicate the transaction at commit_ts {bad.commit_ts}" in drainer.output
        assert "ALTER TABLE shop.ghosts: the schema tracker knows no such table" in drainer.output
        assert drainer.checkpoint()["commitTS"] < bad.commit_ts
        failed = registered_drainer(meta_addr, drainer.node_id)
        assert failed["state"] == "failed" and failed["error_time"] is not None
        assert f"cannot replicate the transaction at commit_ts {bad.commit_ts}" in failed["error"]
        listing = run_cli("ctl", "--meta", meta_addr, "drainers").stdout
        assert re.search(r"drainer-1 .* failed ", listing)
        assert re.search(rf"drainer drainer-1 failed at \S+: .*commit_ts {bad.commit_ts}", listing)

        drainer.extra_config = f"[filter]\nignore-txn-commit-ts = [{bad.commit_ts}]"
        drainer.start()
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert drainer.stop() == 0
        paused = registered_drainer(meta_addr, drainer.node_id)
        assert (paused["state"], paused["error"], paused["error_time"]) == ("paused", None, None)
        assert_delivered_without(drainer, producer, {bad.commit_ts})
    finally:
        drainer.kill()


def test_skip_rules_take_the_drainer_past_each_kind_of_fault_with_one_restart(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    try:
        start_with_users(drainer, producer, 5)
        ghosts = [write_raw_row(producer, table("ghosts", 77), (i, "g")) for i in range(3)]
        bad_ddl = producer.alter(table("scratch", 12))
        misfits = [write_misfit_row(producer) for _ in range(2)]
        assert more_rows_then_exit(drainer, producer) == 2
        assert f"cannot replicate the transaction at commit_ts {ghosts[0].commit_ts}" in drainer.output
        assert "skip every such row with the line unknown-table-ids = true under [skip]" in drainer.output
        line = f"commit-ts = [[{ghosts[0].commit_ts}, {ghosts[0].commit_ts}]] under [skip]"
        assert line in drainer.output

        drainer.extra_config = (
            '[skip]\nunknown-table-ids = true\ntables = ["shop.scratch"]\n'
            f"commit-ts = [[{misfits[0].commit_ts}, {misfits[-1].commit_ts}]]"
        )
        drainer.start()
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert "skipping rows of table id 77 from commit_ts" in drainer.output
        assert (
            f"skipping the DDL at commit_ts {bad_ddl.commit_ts} (shop.scratch in [skip] tables"
            in drainer.output
        )
        for misfit in misfits:
            assert f"skipping the transaction at commit_ts {misfit.commit_ts}" in drainer.output
        assert_delivered_without(drainer, producer, {w.commit_ts for w in (*ghosts, bad_ddl, *misfits)})
    finally:
        drainer.kill()


def test_skip_and_log_stores_what_it_cannot_build_in_the_dead_letter_directory(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    try:
        start_with_users(drainer, producer, 5)
        assert drainer.stop() == 0
        held = producer.txn([("insert", "users", None, (50, "held back"))])
        ghosts = [write_raw_row(producer, table("ghosts", 77), (i, "g")) for i in range(2)]
        bad_ddl = producer.alter(table("scratch", 12))
        inserts(producer, 100, 5)
        policy = f'[skip]\non-error = "skip-and-log"\ncommit-ts = [[{held.commit_ts}, {held.commit_ts}]]'
        drainer.extra_config = policy
        drainer.start()
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        for commit_ts in (ghosts[0].commit_ts, ghosts[1].commit_ts, bad_ddl.commit_ts):
            assert (
                f"skip-and-log: skipped the transaction at commit_ts {commit_ts}, stored in" in drainer.output
            )
        dead_letter = drainer.data_dir / "dead-letter"
        skipped = [w.commit_ts for w in (held, *ghosts, bad_ddl)]
        assert [e.commit_ts for e in BinlogFileReader(dead_letter).events()] == skipped
        assert_delivered_without(drainer, producer, set(skipped))
    finally:
        drainer.kill()


def test_retriable_sink_errors_are_retried_and_a_final_one_stops_the_drainer(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr, "fail-writes = 3")
    try:
        drainer.start()
        producer.create(table("users", 10))
        inserts(producer, 0, 20)
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
        assert drainer.status()["sink"]["sink_retries"] == 3
        assert 'bridge_drainer_errors_total{where="sink"} 3.0' in drainer.metrics()
        assert drainer.stop() == 0

        refused = producer.txn([("insert", "users", None, (500, "refused"))])
        drainer.sink_tables = f'[sink."{SINK_TYPE}"]\nfail-at-commit-ts = {refused.commit_ts}'
        drainer.start()
        assert drainer.child is not None
        assert drainer.child.wait(timeout=120) == 1
        assert f"refusing commit_ts {refused.commit_ts}" in drainer.output
        assert drainer.checkpoint()["commitTS"] < refused.commit_ts
    finally:
        drainer.kill()


def test_sigterm_while_the_sink_keeps_failing_stops_cleanly(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr, "fail-writes = 1000000")
    try:
        drainer.start()
        producer.create(table("users", 10))
        inserts(producer, 0, 3)
        assert drainer.child is not None
        drainer.child.wait_for_line(r"sink recording: write failed \(retrying")
        assert drainer.stop() == 0
        assert "stopped while the sink was failing" in drainer.output
        assert not (drainer.data_dir / "checkpoint.json").exists()  # nothing was ever flushed
    finally:
        drainer.kill()


def test_a_paused_then_closed_pump_is_drained_and_let_go(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    third = PumpProcess(tmp_path, meta_addr, node_id="pump-leaving")
    try:
        drainer.start()
        third.start()
        producer.create(table("users", 10))
        wait_until(lambda: "pump-leaving" in producer.client.available, what="the client to see pump-leaving")
        inserts(producer, 0, 30)
        assert run_cli("ctl", "--meta", meta_addr, "pause", "pump-leaving").returncode == 0
        inserts(producer, 100, 10)  # the paused pump still holds the merge only at its watermark
        assert run_cli("ctl", "--meta", meta_addr, "resume", "pump-leaving").returncode == 0
        inserts(producer, 200, 10)
        closing = run_cli("ctl", "--meta", meta_addr, "close", "pump-leaving")
        assert closing.returncode == 0, closing.stderr
        assert third.child is not None
        assert third.child.wait(timeout=120) == 0  # offline once the drainer's checkpoint passed it
        assert drainer.child is not None
        drainer.child.wait_for_line(r"pump pump-leaving drained to its final watermark")
        inserts(producer, 300, 20)
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
        assert {p["node_id"] for p in drainer.status()["pumps"]} == {"pump-0", "pump-1"}
    finally:
        third.kill()
        drainer.kill()


def test_ctl_shows_drainers_and_closes_one_for_good(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = drainer_with(tmp_path, meta_addr)
    try:
        drainer.start()
        producer.create(table("users", 10))
        inserts(producer, 0, 3)
        drainer.wait_checkpoint(producer.written[-1].commit_ts)

        def shown_checkpoint() -> int:
            shown = run_cli("ctl", "--meta", meta_addr, "drainers")
            assert shown.returncode == 0, shown.stderr
            header, row = shown.stdout.splitlines()[:2]
            assert header.split()[:4] == ["NODE", "ID", "ADDR", "STATE"] and "CHECKPOINT TS" in header
            cells = row.split()
            assert cells[0] == "drainer-1" and cells[2:4] == ["online", "yes"]
            return int(cells[4])

        wait_until(
            lambda: shown_checkpoint() >= producer.written[-1].commit_ts,
            what="ctl drainers to show the checkpoint",
        )
        paused = run_cli("ctl", "--meta", meta_addr, "pause", "drainer-1")
        assert paused.returncode != 0 and "a drainer is not paused" in paused.stderr
        closed = run_cli("ctl", "--meta", meta_addr, "close", "drainer-1")
        assert closed.returncode == 0, closed.stderr
        assert drainer.child is not None and drainer.child.wait(timeout=120) == 0
        assert drainer.checkpoint()["consistent"] is True
        nodes = run_cli("ctl", "--meta", meta_addr, "drainers").stdout
        assert nodes.splitlines()[1].split()[2] == "offline"
    finally:
        drainer.kill()
