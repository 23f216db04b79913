"""consume's JSON lines (bridge.apps.consume.jsonout) and its argument checks (bridge.cli.consume)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pytest

from bridge.apps.consume.items import DDLItem, EndItem, ResolvedItem, RowItem, TombstoneItem, Where
from bridge.apps.consume.jsonout import item_dict, json_line, plain
from bridge.cli import build_parser
from bridge.cli.consume import check
from bridge.errors import UserError
from bridge.proto import row_pb2

WHERE = Where("bridge.shop.t", 1, 42)


def test_values_become_lossless_json() -> None:
    value = {
        "d": Decimal("-12.3400"), "u": Decimal("18446744073709551615"), "b": b"\x00\xff",
        "dt": datetime(2026, 1, 2, 3, 4, 5, 6), "ts": datetime(2026, 1, 2, tzinfo=UTC),
        "day": date(2026, 1, 2), "t": time(1, 2, 3), "td": timedelta(hours=-1),
        "zero": "0000-00-00", "n": None, "f": 1.5, "nan": float("nan"), "l": [1, b"a"],
    }  # fmt: skip
    out = json.loads(json.dumps(plain(value)))
    assert out == {
        "d": "-12.3400", "u": "18446744073709551615", "b": "AP8=", "dt": "2026-01-02T03:04:05.000006",
        "ts": "2026-01-02T00:00:00+00:00", "day": "2026-01-02", "t": "01:02:03", "td": "-1 day, 23:00:00",
        "zero": "0000-00-00", "n": None, "f": 1.5, "nan": "nan", "l": [1, "YQ=="],
    }  # fmt: skip


def test_each_kind_of_message_has_its_shape() -> None:
    source = {
        "cluster_id": 1,
        "db": "shop",
        "table": "t",
        "start_ts": 1,
        "commit_ts": 2,
        "pos": 0,
        "last": True,
    }
    row = RowItem(WHERE, {"id": 1}, "u", {"id": 1, "v": b"x"}, {"id": 1, "v": b"y"}, source, 99)
    assert json.loads(json_line(row)) == {
        "topic": "bridge.shop.t", "partition": 1, "offset": 42, "key": {"id": 1}, "op": "u",
        "before": {"id": 1, "v": "eA=="}, "after": {"id": 1, "v": "eQ=="}, "source": source, "ts_ms": 99,
    }  # fmt: skip
    schema = row_pb2.TableSchema(table_id=5, db="shop", table="t")
    schema.columns.add(id=1, name="id", type=row_pb2.ColumnType.BIGINT)
    ddl = DDLItem(WHERE, {"kind": "CREATE_TABLE", "commit_ts": 2, "table_schema": schema.SerializeToString()})
    shown = item_dict(ddl)["ddl"]
    assert shown["kind"] == "CREATE_TABLE" and shown["table_schema"]["columns"][0]["name"] == "id"
    assert (
        item_dict(DDLItem(WHERE, {"kind": "DROP_TABLE", "table_schema": b""}))["ddl"]["table_schema"] is None
    )
    assert item_dict(ResolvedItem(WHERE, 7))["resolved_ts"] == 7
    assert item_dict(TombstoneItem(WHERE, {"id": 1})) == {
        "topic": "bridge.shop.t", "partition": 1, "offset": 42, "key": {"id": 1}, "tombstone": True,
    }  # fmt: skip
    with pytest.raises(TypeError):
        item_dict(EndItem(WHERE))


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["consume", "--bootstrap-servers", "b:9092", *argv])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "--topic .* or --prefix"),
        (("--topic", "t", "--apply", "sqlite:///x"), "--apply needs --prefix"),
        (("--prefix", "p", "--topic", "t", "--apply", "sqlite:///x"), "drop --topic"),
        (("--prefix", "p", "--until-ts", "-1"), "--until-ts"),
        (("--prefix", "p", "--idle-timeout", "0"), "--idle-timeout"),
        (("--prefix", "p", "--max-messages", "0"), "--max-messages"),
        (("--prefix", "p", "--worker-count", "0"), "--worker-count"),
    ],
)
def test_bad_arguments_are_named(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError, match=message):
        check(parse(*argv))


def test_good_arguments_pass() -> None:
    check(parse("--prefix", "p", "--apply", "sqlite:///x", "--until-ts", "5", "--idle-timeout", "3"))
    check(parse("--topic", "a", "--topic", "b", "--from-beginning", "--resolved", "--max-messages", "9"))
