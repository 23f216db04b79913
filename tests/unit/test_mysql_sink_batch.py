"""Batching of the MySQL sink: groups, the statements they become, and literals (no services)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from drainer.sinks.mysql import batch as mysql_batch
from drainer.sinks.mysql.batch import Op, groups, plan, units
from drainer.sinks.mysql.translate import TableWriter, literal_of
from drainer.sinks.sql.mysql import MySQLDialect
from drainer.sinks.sql.sql import build_table_sql
from tests.support.binlog_events import table_schema

T = row_pb2.ColumnType


def writer(schema: row_pb2.TableSchema) -> TableWriter:
    return TableWriter(build_table_sql(MySQLDialect(), schema), schema)


KEYED = writer(table_schema("d", "k", [("id", T.INT), ("v", T.VARCHAR)], key=["id"]))
PAIR = writer(table_schema("d", "p", [("a", T.INT), ("b", T.INT), ("v", T.VARCHAR)], key=["a", "b"]))
KEYLESS = writer(table_schema("d", "n", [("a", T.INT), ("b", T.VARCHAR)]))


def ins(table: TableWriter, row: tuple[object, ...], safe: bool = False, ts: int = 1) -> Op:
    return Op("insert", table, None, row, ts, safe)


def test_consecutive_inserts_become_one_multi_row_insert_or_replace() -> None:
    ops = [ins(KEYED, (i, "x"), ts=10 + i) for i in range(3)]
    (group,) = groups(ops, 500)
    (batch,) = plan(group)
    assert batch.sql == "INSERT INTO `d`.`k` (`id`, `v`) VALUES (0, 'x'), (1, 'x'), (2, 'x')"
    assert not batch.multi and batch.rows == 3 and batch.commit_ts_text == "10..12"
    assert batch.shape == "INSERT INTO `d`.`k` (`id`, `v`) VALUES (%s, %s) [3 rows]"
    (safe,) = plan([ins(KEYED, (1, None), safe=True)])
    assert safe.sql == "REPLACE INTO `d`.`k` (`id`, `v`) VALUES (1, NULL)"
    (keyless,) = plan([ins(KEYLESS, (1, "x"), safe=True)])
    assert keyless.sql.startswith("INSERT INTO")  # keyless tables are never REPLACEd


def test_groups_end_at_table_kind_mode_size_and_a_repeated_key() -> None:
    ops = [
        ins(KEYED, (1, "a")),
        ins(KEYED, (2, "a")),
        Op("delete", KEYED, (2, "a"), None, 2, False),
        Op("delete", KEYED, (1, "a"), None, 2, False),
        ins(KEYED, (1, "b")),
        ins(KEYED, (1, "c"), safe=True),
        ins(KEYED, (2, "c"), safe=True),
        ins(KEYED, (2, "d"), safe=True),  # key 2 again: a new group
        ins(PAIR, (1, 1, "x")),
        ins(PAIR, (1, 2, "x")),
        ins(PAIR, (1, 3, "x")),
    ]
    sizes = [len(g) for g in groups(ops, 2)]
    assert sizes == [2, 2, 1, 2, 1, 2, 1]


def test_a_group_of_mixed_small_changes_of_different_rows_is_one_delete_and_one_insert_per_table() -> None:
    ops = [
        ins(KEYED, (1, "a"), ts=1),
        Op("update", KEYED, (7, "x"), (7, "y"), 1, False),
        ins(PAIR, (1, 1, "p"), ts=2),
        Op("delete", KEYED, (8, "x"), None, 2, False),
        ins(KEYED, (2, "b"), ts=3),
        Op("update", KEYED, (1, "a"), (1, "c"), 4, False),  # key 1 again: the next group
    ]
    first, second = groups(ops, 500)
    assert len(first) == 5 and len(second) == 1
    (unit,) = units(first, 500)[:1]
    assert [b.sql for b in unit.batches] == [
        "DELETE FROM `d`.`k` WHERE `id` IN (7, 8)",
        "INSERT INTO `d`.`k` (`id`, `v`) VALUES (1, 'a'), (7, 'y'), (2, 'b')",
        "INSERT INTO `d`.`p` (`a`, `b`, `v`) VALUES (1, 1, 'p')",
    ]
    assert unit.ops == 5 and unit.high_ts == 3
    assert unit.counts == {
        ("d.k", "insert"): 2,
        ("d.k", "update"): 1,
        ("d.p", "insert"): 1,
        ("d.k", "delete"): 1,
    }


def test_deletes_by_key_in_one_statement_and_composite_keys_as_or_chains() -> None:
    (batch,) = plan([Op("delete", KEYED, (i, "x"), None, 5, False) for i in (3, 4, 3)])
    assert batch.sql == "DELETE FROM `d`.`k` WHERE `id` IN (3, 4)" and batch.rows == 2
    (pair,) = plan([Op("delete", PAIR, (1, i, "x"), None, 5, False) for i in (1, 2)])
    assert pair.sql == "DELETE FROM `d`.`p` WHERE (`a` = 1 AND `b` = 1) OR (`a` = 1 AND `b` = 2)"


def test_updates_as_delete_and_insert_or_replace_or_per_row_in_one_round_trip() -> None:
    ops = [Op("update", KEYED, (i, "old"), (i + 10, "new"), 7, False) for i in (1, 2)]
    delete, insert = plan(ops)  # batch-updates (the default): the old keys go, the new rows come
    assert delete.sql == "DELETE FROM `d`.`k` WHERE `id` IN (1, 2)"
    assert insert.sql == "INSERT INTO `d`.`k` (`id`, `v`) VALUES (11, 'new'), (12, 'new')"
    (normal,) = plan(ops, batch_updates=False)
    assert normal.multi and normal.sql == (
        "UPDATE `d`.`k` SET `id` = 11, `v` = 'new' WHERE `id` = 1;\n"
        "UPDATE `d`.`k` SET `id` = 12, `v` = 'new' WHERE `id` = 2"
    )
    assert normal.shape == "UPDATE `d`.`k` SET `id` = %s, `v` = %s WHERE `id` = %s [2 statements]"
    delete, replace = plan([op._replace(safe=True) for op in ops], batch_updates=False)
    assert delete.sql == "DELETE FROM `d`.`k` WHERE `id` IN (1, 2)"
    assert replace.sql == "REPLACE INTO `d`.`k` (`id`, `v`) VALUES (11, 'new'), (12, 'new')"
    assert delete.rows == replace.rows == 2


def test_keyless_updates_and_deletes_match_the_whole_row_one_at_a_time() -> None:
    (delete,) = plan([Op("delete", KEYLESS, (1, None), None, 3, False, 1)])
    assert delete.multi and delete.sql == "DELETE FROM `d`.`n` WHERE `a` <=> 1 AND `b` <=> NULL LIMIT 1"
    (update,) = plan([Op("update", KEYLESS, (1, "x"), (2, "y"), 3, False, 1)])
    assert update.sql == "UPDATE `d`.`n` SET `a` = 2, `b` = 'y' WHERE `a` <=> 1 AND `b` <=> 'x' LIMIT 1"


def test_long_batches_are_split_below_the_statement_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mysql_batch, "STATEMENT_BYTES", 80)
    batches = plan([ins(KEYED, (i, "x" * 10)) for i in range(6)])
    assert [b.rows for b in batches] == [2, 2, 2]
    assert all(len(b.sql) <= 80 and b.sql.startswith("INSERT INTO") for b in batches)
    deletes = plan([Op("delete", KEYED, (i, "x"), None, 5, False) for i in range(30)])
    assert len(deletes) > 1 and all(b.sql.endswith(")") for b in deletes)
    assert sum(b.rows for b in deletes) == 30


def test_identifiers_with_percent_are_written_once() -> None:
    table = writer(table_schema("d", "50%", [("id", T.INT)], key=["id"]))
    assert table.sql.insert == "INSERT INTO `d`.`50%%` (`id`) VALUES (%s)"  # for pymysql formatting
    (batch,) = plan([ins(table, (1,))])
    assert batch.sql == "INSERT INTO `d`.`50%` (`id`) VALUES (1)"  # run unformatted


def lit(kind: int, value: object, **extra: object) -> str:
    return literal_of(row_pb2.Column(name="c", type=kind, **extra))(value)  # type: ignore[arg-type]


def test_literals_of_every_type() -> None:
    assert lit(T.VARCHAR, 'it\'s \\ "q" \x00\n\r\x1a ✓') == "'it\\'s \\\\ \\\"q\\\" \\0\\n\\r\\Z ✓'"
    assert lit(T.BIGINT, (1 << 64) - 1) == "18446744073709551615" and lit(T.INT, -5) == "-5"
    assert lit(T.DECIMAL, Decimal("-1E-7")) == "-0.0000001"
    assert lit(T.DOUBLE, 0.1 + 0.2) == "0.30000000000000004e0" and lit(T.DOUBLE, 1e300) == "1e+300"
    with pytest.raises(ValueError, match="inf"):
        lit(T.DOUBLE, float("inf"))
    assert lit(T.BLOB, b"\x00'\xff") == "_binary X'0027ff'"
    assert (
        lit(T.DATE, date(2024, 2, 29)) == "'2024-02-29'" and lit(T.DATE, MySQLDate(0, 0, 0)) == "'0000-00-00'"
    )
    assert lit(T.DATETIME, datetime(2024, 1, 2, 3, 4, 5, 120000), fsp=3) == "'2024-01-02 03:04:05.120000'"
    assert lit(T.DATETIME, MySQLDateTime(0, 0, 0), fsp=2) == "'0000-00-00 00:00:00.00'"
    aware = datetime(2030, 1, 1, 1, 0, 0, tzinfo=UTC).astimezone()
    assert lit(T.TIMESTAMP, aware) == "'2030-01-01 01:00:00'"
    negative = -timedelta(hours=838, minutes=59, seconds=58, microseconds=990000)
    assert lit(T.TIME, negative, fsp=2) == "'-838:59:58.990000'"
    assert lit(T.INT, "7") == "'7'"  # an unexpected type falls back to pymysql's escaping, quoted


def test_the_generated_row_writes_what_the_reference_writes() -> None:
    """TableWriter.row is a generated function of a full-width image; row_reference is the loop it
    replaces: the same text for every column type, NULLs, values needing escapes, unexpected types
    (pymysql's fallback), generated columns left out, and a short image (the reference's route)."""
    columns = [
        ("id", T.BIGINT), ("i", T.INT), ("d", T.DECIMAL), ("f", T.DOUBLE), ("s", T.VARCHAR),
        ("t", T.DATETIME), ("b", T.BLOB), ("dt", T.DATE), ("tm", T.TIME), ("ts", T.TIMESTAMP),
    ]  # fmt: skip
    table = writer(table_schema("d", "all", columns, key=["id"]))
    images: list[tuple[object, ...]] = [
        (1, -5, Decimal("12.30"), 0.25, "plain", datetime(2024, 1, 2, 3, 4, 5, 6), b"\x00'",
         date(2024, 2, 29), timedelta(hours=-1), datetime(2030, 1, 1, tzinfo=UTC)),
        (2, None, None, None, None, None, None, None, None, None),
        (3, True, Decimal("-1E-7"), 1e300, "it's \\ \"q\" \x00\n", MySQLDateTime(0, 0, 0), b"",
         MySQLDate(0, 0, 0), timedelta(0), None),
        ((1 << 64) - 1, "7", 5, 3, 4, "text", "x", "2024-01-01", None, None),
    ]  # fmt: skip
    for image in images:
        assert table.row(image) == table.row_reference(image)
    assert table.row(images[1][:3]) == table.row_reference(images[1][:3])  # not full width
    schema = table_schema("d", "gen", [("id", T.INT), ("g", T.INT), ("v", T.VARCHAR)], key=["id"])
    schema.columns[1].generated = row_pb2.STORED
    generated = writer(schema)
    assert generated.row((1, 2, "x")) == generated.row_reference((1, 2, "x")) == "(1, 'x')"


def test_a_statement_that_fits_is_one_chunk_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """_chunks' fast path (everything fits) gives what its loop gives, at the boundary too."""
    parts = ["(1, 'aa')", "(2, 'bb')", "(3, 'cc')"]
    exact = len("P") + sum(len(p) + 2 for p in parts)
    for limit in (exact - 1, exact, exact + 1, 5):
        monkeypatch.setattr(mysql_batch, "STATEMENT_BYTES", limit)
        got = list(mysql_batch._chunks("P", parts, ", ", ")"))
        assert "".join(text for text, _ in got).count("(") == 3 and sum(n for _, n in got) == 3
        if limit >= exact:
            assert got == [("P" + ", ".join(parts) + ")", 3)]
        else:
            assert len(got) > 1
    assert list(mysql_batch._chunks("P", [], ", ")) == []
