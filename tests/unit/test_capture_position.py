"""Positions and GTID sets of the capture, and its journal: replay, torn tail, compaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.apps.capture.journal import JOURNAL_FILE, Journal
from bridge.apps.capture.position import Position, add_gtid
from bridge.errors import StoreError
from bridge.proto import row_pb2


def test_mariadb_gtid_replaces_its_domain_entry() -> None:
    assert add_gtid("mariadb", "", "0-1-5") == "0-1-5"
    assert add_gtid("mariadb", "0-1-5,1-2-9", "0-1-6") == "0-1-6,1-2-9"
    assert add_gtid("mariadb", "1-2-9", "0-3-1") == "0-3-1,1-2-9"


def test_mysql_gtid_is_added_to_its_source_intervals() -> None:
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert add_gtid("mysql", "", f"{uuid}:1") == f"{uuid}:1"
    assert add_gtid("mysql", f"{uuid}:1-5", f"{uuid}:6") == f"{uuid}:1-6"
    assert add_gtid("mysql", f"{uuid}:1-5", f"{uuid}:8") == f"{uuid}:1-5:8"
    assert add_gtid("mysql", f"{uuid}:1-5:8", f"{uuid}:7") == f"{uuid}:1-5:7-8"
    assert add_gtid("mysql", f"{uuid}:1-5:7-8", f"{uuid}:6") == f"{uuid}:1-8"
    assert add_gtid("mysql", f"{uuid.upper()}:1", "ff:1") == f"{uuid}:1,ff:1"  # sources sorted, lower case


def test_position_after_a_transaction_keeps_mode_and_moves_file_offset_and_gtid() -> None:
    start = Position("mariadb", "gtid", "bin.000001", 4, "0-1-5")
    after = start.after("bin.000002", 120, "0-1-6")
    assert (after.file, after.offset, after.gtid, after.mode) == ("bin.000002", 120, "0-1-6", "gtid")
    assert Position.from_json(after.to_json()) == after
    assert start.after("", 200, None).file == "bin.000001"


def _schema(name: str) -> row_pb2.TableSchema:
    column = row_pb2.Column(id=1, name="id", type=row_pb2.ColumnType.INT)
    return row_pb2.TableSchema(table_id=7, db="d", table=name, columns=[column], max_column_id=1)


def test_journal_replays_commits_schemas_and_the_pending_second_phase(tmp_path: Path) -> None:
    position = Position("mariadb", "gtid", "bin.000001", 300, "0-1-9")
    journal = Journal(tmp_path, fsync=False)
    assert journal.fresh
    journal.begin(10)
    journal.commit(10, 11, position, {"d.t": _schema("t")})
    journal.begin(12)
    journal.close()

    again = Journal(tmp_path, fsync=False)
    assert again.state.position == position
    assert again.state.tables["d.t"] == _schema("t")
    assert again.state.pending is not None and (
        again.state.pending.start_ts,
        again.state.pending.commit_ts,
    ) == (12, 0)
    again.settled()
    again.commit(13, 14, position.after("bin.000001", 400, "0-1-10"), {"d.t": None})
    again.close()

    last = Journal(tmp_path, fsync=False)
    assert last.state.tables == {}
    assert last.state.position is not None and last.state.position.offset == 400
    assert last.state.pending is not None and last.state.pending.commit_ts == 14


def test_a_torn_last_record_is_ignored_and_a_torn_middle_one_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync=False)
    journal.begin(10)
    journal.close()
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(path.read_bytes() + b'{"r": "comm')
    assert Journal(tmp_path, fsync=False).state.pending is not None
    path.write_bytes(b'{"r": "comm\n' + path.read_bytes())
    with pytest.raises(StoreError, match="line 1"):
        Journal(tmp_path, fsync=False)


def test_compaction_keeps_the_state_and_old_records_are_not_applied_twice(tmp_path: Path) -> None:
    position = Position("mysql", "file", "bin.000003", 500)
    journal = Journal(tmp_path, fsync=True)
    journal.snapshot("running", position)
    journal.commit(20, 21, position, {"d.t": _schema("t")})
    old_journal = (tmp_path / JOURNAL_FILE).read_bytes()
    journal.compact()
    journal.snapshot("done")
    journal.close()
    # a crash between rewriting the state file and truncating the journal leaves old records behind
    (tmp_path / JOURNAL_FILE).write_bytes(old_journal + (tmp_path / JOURNAL_FILE).read_bytes())
    state = Journal(tmp_path, fsync=False).state
    assert state.snapshot == "done" and state.position == position and "d.t" in state.tables
