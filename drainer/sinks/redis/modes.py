"""What each mode makes of a row change: the commands and message formats.

For every rule that applies to the changed table (:class:`TableRule`), with
``keys`` = the rule's templates rendered from the before image and from the
after image (both for an update, so a changed primary key or unique column
invalidates the old keys and the new ones):

- ``invalidate``: UNLINK (or DEL) of ``keys`` (none for an update whose after
  image equals its before image: no cached key or value changed).
- ``upsert``: a delete: DEL of the before keys. Otherwise the after-image is
  written to every after key — ``json``: ``SET key <row JSON> [PX ttl]``;
  ``hash``: ``DEL key`` then ``HSET key column text ...`` (NULL columns left
  out) then ``PEXPIRE`` when a TTL is set — and a before key the after image
  no longer renders is deleted.
- ``publish``: ``PUBLISH channel <message>``; per row, the message is
  :func:`row_message`; per transaction, one message per channel holding the
  transaction's changes for it, in parts of at most :data:`TXN_PART_CHANGES`
  (``part`` counts from 0, ``last`` marks the final one).
- ``stream``: ``XADD stream [MAXLEN|MINID ~ n] * <fields>`` with the fields of
  :func:`stream_fields`.

Messages and stream entries carry ``commit_ts`` and ``pos`` (the change's
index in its transaction): after a crash the drainer may send a change
again, and (commit_ts, pos) identifies it (docs/redis-sink.md, "Duplicates").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bridge.proto import row_pb2
from bridge.sink.events import RowChange, TxnEvent
from drainer.sinks.redis.pipeline import Delivery, Origin
from drainer.sinks.redis.render import dumps, json_image, key_text
from drainer.sinks.redis.rules import TableRule

TXN_PART_CHANGES = 1000


# (first row, the transaction's rows after it, keys, limit) -> (the next row not handled, rows handled)
Runner = Callable[[RowChange, Iterator[RowChange], list[str], int], tuple[RowChange | None, int]]


@dataclass(frozen=True)
class TablePlan:
    """One table (at one schema version) and the rules that apply to it."""

    schema: row_pb2.TableSchema
    name: str
    columns: tuple[str, ...]
    pk: tuple[int, ...]
    rules: tuple[TableRule, ...]
    # every rule only invalidates: the changes take the fast path of invalidate_run
    invalidate_only: bool = field(init=False, compare=False)
    invalidate_run: Runner = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        only = all(rule.rule.config.modes == ["invalidate"] for rule in self.rules)
        object.__setattr__(self, "invalidate_only", only)
        object.__setattr__(self, "invalidate_run", invalidation_run(self.rules))


@dataclass
class Change:
    """One change being written: its images rendered lazily, once."""

    event: TxnEvent
    pos: int
    row: RowChange
    plan: TablePlan
    _images: dict[str, Any] = field(default_factory=dict)

    def image(self, which: str) -> dict[str, object] | None:
        if which not in self._images:
            values = self.row.before if which == "before" else self.row.after
            self._images[which] = json_image(self.plan.columns, values)
        return self._images[which]  # type: ignore[no-any-return]

    def key(self) -> dict[str, object] | None:
        """The primary (or NOT NULL unique) key's columns of the row, or None for a keyless table."""
        image = self.image("after" if self.row.after is not None else "before")
        if not self.plan.pk or image is None:
            return None
        return {self.plan.columns[i]: image[self.plan.columns[i]] for i in self.plan.pk}


# Types whose equal values always render the same text (not so for floats: -0.0 == 0.0).
_SAME_TEXT_WHEN_EQUAL = frozenset((int, str, bytes))


def invalidation_keys(rules: tuple[TableRule, ...], row: RowChange) -> list[str]:
    """The keys an invalidate-only table's change deletes: every template rendered from the
    before image and, where it renders differently, from the after image."""
    before, after = row.before, row.after
    keys: list[str] = []
    for rule in rules:
        for renderer in rule.keys:
            if before is None:
                keys.append(renderer.render(after))  # type: ignore[arg-type]
                continue
            old = renderer.render(before)
            keys.append(old)
            if after is None:
                continue
            for position in renderer.positions:
                value = before[position]
                if value != after[position] or type(value) not in _SAME_TEXT_WHEN_EQUAL:
                    new = renderer.render(after)
                    if new != old:
                        keys.append(new)
                    break
    return keys


def invalidation_run(rules: tuple[TableRule, ...]) -> Runner:
    """The keys of a run of consecutive changes of one table, in one call: ``run(first, rest, keys,
    limit)`` appends to ``keys`` :func:`invalidation_keys` of ``first`` and each following change of
    the same table (an update whose after image equals its before image adds nothing), stopping at
    the first change of another table or once ``keys`` holds ``limit`` keys; it returns the next
    change not handled (None at the end) and how many it handled. For one template of one column,
    the loop renders inline (no call per change)."""
    if len(rules) != 1 or len(rules[0].keys) != 1 or len(rules[0].keys[0].positions) != 1:

        def each(first: RowChange, rest: Iterator[RowChange], keys: list[str], limit: int
                 ) -> tuple[RowChange | None, int]:  # fmt: skip
            schema, handled = first.table, 0
            for row in itertools.chain((first,), rest):
                if row.table is not schema:
                    return row, handled
                handled += 1
                if row.kind != "update" or row.before != row.after:
                    keys.extend(invalidation_keys(rules, row))
                    if len(keys) >= limit:
                        return next(rest, None), handled
            return None, handled

        return each
    renderer = rules[0].keys[0]
    (position,), (prefix, suffix), null = renderer.positions, renderer.literals, renderer.null_token
    same_text = _SAME_TEXT_WHEN_EQUAL

    def one_column(first: RowChange, rest: Iterator[RowChange], keys: list[str], limit: int
                   ) -> tuple[RowChange | None, int]:  # fmt: skip
        schema, append, handled = first.table, keys.append, 0
        for handled, row in enumerate(itertools.chain((first,), rest)):
            if row.table is not schema:
                return row, handled
            before, after = row.before, row.after
            if before is None:
                value = after[position]  # type: ignore[index]
            elif after is None:
                value = before[position]
            elif row.kind == "update" and before == after:
                continue  # an equal update changes nothing
            else:
                value = before[position]
            kind = type(value)
            if kind is int or kind is str:
                old = f"{prefix}{value}{suffix}"
            else:
                old = prefix + key_text(value, null) + suffix
            append(old)
            if before is not None and after is not None:
                new_value = after[position]
                if new_value != value or kind not in same_text:
                    new = prefix + key_text(new_value, null) + suffix
                    if new != old:
                        append(new)
            if len(keys) >= limit:
                return next(rest, None), handled + 1
        else:
            return None, handled + 1

    return one_column


def row_message(change: Change, keys: list[str], cluster_id: int) -> dict[str, object]:
    """The JSON message of one row change (publish per row)."""
    return {
        "op": change.row.kind,
        "db": change.plan.schema.db,
        "table": change.plan.schema.table,
        "commit_ts": change.event.commit_ts,
        "start_ts": change.event.start_ts,
        "pos": change.pos,
        "cluster_id": cluster_id,
        "keys": keys,
        "before": change.image("before"),
        "after": change.image("after"),
    }


def stream_fields(change: Change, keys: list[str]) -> list[object]:
    """The field/value pairs of one stream entry, flattened (values are text; JSON where marked)."""
    return [
        "op", change.row.kind,
        "db", change.plan.schema.db,
        "table", change.plan.schema.table,
        "commit_ts", change.event.commit_ts,
        "start_ts", change.event.start_ts,
        "pos", change.pos,
        "key", dumps(change.key()),
        "keys", dumps(keys),
        "before", dumps(change.image("before")),
        "after", dumps(change.image("after")),
    ]  # fmt: skip


class ModeWriter:
    """Queues the commands of row changes on a :class:`Delivery`, rule by rule."""

    def __init__(self, delivery: Delivery, null_token: str, cluster_id: int) -> None:
        self.delivery = delivery
        self.null_token = null_token
        self.cluster_id = cluster_id
        # publish per transaction: channel -> [part number, changes waiting]
        self._txn: dict[str, tuple[int, list[dict[str, object]]]] = {}
        self._event: TxnEvent | None = None

    def reset(self) -> None:
        """Forget a transaction's messages being gathered (after a failure)."""
        self._txn.clear()
        self._event = None

    def change(self, change: Change) -> None:
        row = change.row
        commit_ts, table = change.event.commit_ts, change.plan.name
        # An update that wrote the values the row had changes no cached key or value.
        unchanged = row.kind == "update" and row.before == row.after
        for table_rule in change.plan.rules:
            before = table_rule.render_keys(row.before) if row.before is not None else []
            after = table_rule.render_keys(row.after) if row.after is not None else []
            keys = (
                before + [key for key in after if key not in before] if before and after else before or after
            )
            for mode in table_rule.rule.config.modes:
                if mode == "publish":
                    self._publish(change, table_rule, keys, Origin(commit_ts, table, "publish"))
                elif mode == "stream":
                    self._stream(change, table_rule, keys, Origin(commit_ts, table, "stream"))
                elif unchanged:
                    continue
                elif mode == "invalidate":
                    self.delivery.delete(keys, Origin(commit_ts, table, "invalidate"))
                else:
                    self._upsert(change, table_rule, before, after, Origin(commit_ts, table, "upsert"))

    def _upsert(
        self, change: Change, rule: TableRule, before: list[str], after: list[str], origin: Origin
    ) -> None:
        gone = [key for key in before if key not in after]
        if gone:
            self.delivery.delete(gone, origin)
        if not after:
            return
        config = rule.rule.config
        ttl = int(config.upsert_ttl * 1000)
        if config.upsert_format == "json":
            document = dumps(change.image("after"))
            for key in after:
                self.delivery.add(
                    ("SET", key, document, "PX", ttl) if ttl else ("SET", key, document), origin, keys=1
                )
            return
        row = change.row.after
        assert row is not None
        pairs: list[object] = []
        for column, value in zip(change.plan.columns, row, strict=True):
            if value is not None:
                pairs += [column, key_text(value, self.null_token)]
        for key in after:
            self.delivery.add(("DEL", key), origin)
            self.delivery.add(("HSET", key, *pairs), origin, keys=1)
            if ttl:
                self.delivery.add(("PEXPIRE", key, ttl), origin)

    def _publish(self, change: Change, rule: TableRule, keys: list[str], origin: Origin) -> None:
        message = row_message(change, keys, self.cluster_id)
        if rule.rule.config.publish_per == "row":
            self.delivery.add(("PUBLISH", rule.channel, dumps(message)), origin, messages=1)
            return
        for name in ("commit_ts", "start_ts", "cluster_id"):
            del message[name]
        self._event = change.event
        _, changes = self._txn.setdefault(rule.channel, (0, []))
        changes.append(message)
        if len(changes) >= TXN_PART_CHANGES:
            self._publish_part(rule.channel, origin, last=False)

    def _publish_part(self, channel: str, origin: Origin, last: bool) -> None:
        event = self._event
        assert event is not None
        part, changes = self._txn[channel]
        message = {
            "commit_ts": event.commit_ts,
            "start_ts": event.start_ts,
            "cluster_id": self.cluster_id,
            "part": part,
            "last": last,
            "changes": changes,
        }
        self.delivery.add(("PUBLISH", channel, dumps(message)), origin, messages=1)
        self._txn[channel] = (part + 1, [])

    def end_transaction(self, event: TxnEvent) -> None:
        """Publish the per-transaction messages of ``event`` that wait."""
        if not self._txn:
            return
        origin = Origin(event.commit_ts, "", "publish")
        for channel in list(self._txn):
            self._publish_part(channel, origin, last=True)
        self._txn.clear()
        self._event = None

    def _stream(self, change: Change, rule: TableRule, keys: list[str], origin: Origin) -> None:
        config = rule.rule.config
        trim: tuple[object, ...] = ()
        if config.stream_maxlen:
            trim = ("MAXLEN", "~", config.stream_maxlen)
        elif config.stream_max_age:
            trim = ("MINID", "~", int((time.time() - config.stream_max_age) * 1000))
        fields = stream_fields(change, keys)
        self.delivery.add(("XADD", rule.stream, *trim, "*", *fields), origin, messages=1)
