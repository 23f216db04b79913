"""What a DDL means for the keys the sink manages.

Rows can change without row events: TRUNCATE and DROP TABLE remove every
row, DROP DATABASE every table's, RENAME TABLE moves the rows away from the
keys rendered with the old name, and an ALTER TABLE may change how the keys
render (a key column's type, the primary key) or, for ``upsert``, what the
cached image holds (any column). :func:`stale_keys` names, for such a DDL,
the key templates whose keys may now be stale; the sink deletes them by
``SCAN MATCH`` on each template's glob (:meth:`KeyRenderer.pattern`), or
logs that they may be stale when ``scan-on-ddl = false``.
"""

from __future__ import annotations

from collections.abc import Iterable

from bridge.proto import row_pb2
from drainer.sinks.redis.rules import KeyRenderer, TableRule

Change = row_pb2.SchemaChange
_REMOVING = (Change.TRUNCATE_TABLE, Change.DROP_TABLE, Change.RENAME_TABLE)


def _managed(rules: Iterable[TableRule]) -> list[TableRule]:
    """The rules that own keys (invalidate, upsert); publish and stream own none."""
    return [r for r in rules if {"invalidate", "upsert"} & set(r.rule.config.modes)]


def _signature(renderer: KeyRenderer, schema: row_pb2.TableSchema, whole_row: bool) -> tuple[object, ...]:
    """What decides the text of a key (and, for upsert, of the cached image)."""
    columns = schema.columns
    used = range(len(columns)) if whole_row else renderer.positions
    described = tuple((columns[i].name.casefold(), _column_type(columns[i])) for i in used)
    return renderer.literals, described


def _column_type(column: row_pb2.Column) -> bytes:
    copy = row_pb2.Column()
    copy.CopyFrom(column)
    copy.id = 0  # a column's id does not change how it renders
    return copy.SerializeToString(deterministic=True)


def stale_keys(
    kind: int,
    before: tuple[TableRule, ...],
    after: tuple[TableRule, ...],
    before_schema: row_pb2.TableSchema | None,
    after_schema: row_pb2.TableSchema | None,
) -> list[KeyRenderer]:
    """The key templates (as the table was before the DDL) whose keys the DDL may have made stale."""
    owned = _managed(before)
    if kind in _REMOVING or kind == Change.DROP_DATABASE:
        return [key for rule in owned for key in rule.keys]
    if kind != Change.ALTER_TABLE or before_schema is None or after_schema is None:
        return []
    now = {r.rule.index: r for r in _managed(after)}
    stale = []
    for rule in owned:
        upsert = "upsert" in rule.rule.config.modes
        later = now.get(rule.rule.index)
        for n, key in enumerate(rule.keys):
            if later is None or n >= len(later.keys):
                stale.append(key)
                continue
            old = _signature(key, before_schema, upsert)
            new = _signature(later.keys[n], after_schema, upsert)
            if old != new:
                stale.append(key)
    return stale
