"""JSON lines for ``binlog-bridge consume`` without ``--apply``.

Values become JSON-friendly: decimals as strings (exact), bytes as base64,
dates, times and datetimes in ISO 8601, other non-JSON values as their text.
A DDL event's ``table_schema`` (a serialized ``bridge.row.TableSchema``) is
shown as its protobuf JSON form.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from google.protobuf.json_format import MessageToDict

from bridge.apps.consume.items import DDLItem, Item, ResolvedItem, RowItem, TombstoneItem
from bridge.proto import row_pb2


def plain(value: Any) -> Any:
    """``value`` with every part turned into something ``json.dumps`` takes losslessly."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return str(value)


def ddl_view(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: plain(v) for k, v in record.items() if k != "table_schema"}
    raw = record.get("table_schema") or b""
    if raw:
        schema = row_pb2.TableSchema.FromString(bytes(raw))
        out["table_schema"] = MessageToDict(schema, preserving_proto_field_name=True)
    else:
        out["table_schema"] = None
    return out


def item_dict(item: Item) -> dict[str, Any]:
    where = {"topic": item.where.topic, "partition": item.where.partition, "offset": item.where.offset}
    if isinstance(item, RowItem):
        return {
            **where,
            "key": plain(item.key),
            "op": item.op,
            "before": plain(item.before),
            "after": plain(item.after),
            "source": plain(item.source),
            "ts_ms": item.ts_ms,
        }
    if isinstance(item, DDLItem):
        return {**where, "ddl": ddl_view(item.record)}
    if isinstance(item, ResolvedItem):
        return {**where, "resolved_ts": item.resolved_ts}
    if isinstance(item, TombstoneItem):
        return {**where, "key": plain(item.key), "tombstone": True}
    raise TypeError(f"not a consume item: {type(item).__name__}")


def json_line(item: Item) -> str:
    return json.dumps(item_dict(item), ensure_ascii=False, separators=(",", ":"))
