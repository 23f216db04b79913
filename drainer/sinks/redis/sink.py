"""The ``redis`` sink: cache invalidation (and publish, stream, upsert) in commit order.

Every row change of a table some rule matches is turned into commands
(:mod:`drainer.sinks.redis.modes`) — for ``invalidate``, an UNLINK of every
key the rule's templates render from the before and the after image — and
sent in non-transactional pipelines (:mod:`drainer.sinks.redis.pipeline`).
Guide: docs/redis-sink.md; configuration: :mod:`drainer.sinks.redis.config`.

How it keeps the contract (:class:`bridge.sink.Sink`):

- ``open`` checks every rule against every table of ``context.tables``: a
  template field a table lacks is a :class:`ConfigError` naming rule, table
  and field, before anything is written. Then it connects (PING).
- ``write`` queues commands and sends a pipeline when it is large or old
  enough. A DDL first sends everything before it, then re-checks the rules
  against the table as the DDL leaves it (the same error, naming the DDL:
  the drainer stops with the checkpoint below it), then deletes keys the DDL
  made stale (:mod:`drainer.sinks.redis.ddl`).
- ``flush`` sends what waits and returns the highest commit_ts whose every
  command Redis acknowledged with success: the checkpoint never passes a
  change whose keys may still be cached.
- A pipeline that fails for a connection error, a timeout or a "not now"
  reply (LOADING, OOM, CLUSTERDOWN, ...) is remembered; later writes are
  dropped until ``flush`` raises :class:`SinkUnavailable`, and the sink
  driver, after logging it and backing off, writes every unflushed event
  again. Deleting is idempotent; published messages and stream entries may
  then repeat, identified by (commit_ts, pos).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from bridge.proto import row_pb2
from bridge.schema import key_positions, table_name
from bridge.sink.batching import BatchingSink, metrics_for
from bridge.sink.contract import SinkContext
from bridge.sink.errors import SinkCheckFailed, SinkError, SinkUnavailable
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, TxnEvent
from drainer.sinks.redis.client import Client, new_client
from drainer.sinks.redis.config import load_config, safe_url
from drainer.sinks.redis.ddl import stale_keys
from drainer.sinks.redis.metrics import RedisMetrics
from drainer.sinks.redis.modes import Change, ModeWriter, TablePlan
from drainer.sinks.redis.pipeline import Delivery, Origin, client_failure
from drainer.sinks.redis.render import dumps
from drainer.sinks.redis.rules import KeyRenderer, Rules

log = logging.getLogger(__name__)

SchemaChange = row_pb2.SchemaChange


class RedisSink(BatchingSink):
    """See the module docstring. Built as ``RedisSink(config_table, data_dir)``."""

    name = "redis"

    def __init__(self, config_table: Mapping[str, Any], data_dir: Path) -> None:
        super().__init__(log)
        self.config = load_config(config_table)
        self.rules = Rules(self.config.rules, self.config.key_separator, self.config.null_token)
        self.data_dir = data_dir
        self.client: Client | None = None
        self._delivery: Delivery | None = None
        self._writer: ModeWriter | None = None
        self._metrics: RedisMetrics | None = None
        self._plans: dict[int, TablePlan] = {}  # id(schema) -> plan (the plan keeps the schema alive)
        self._tables: dict[tuple[str, str], row_pb2.TableSchema] = {}  # known tables, casefolded names
        self._ignored: set[str] = set()  # tables whose changes no rule matches, warned about once
        self._mirrored = -1
        self._last_plan: TablePlan | None = None  # the plan of the last change written

    # -- contract -------------------------------------------------------------------

    def check(self) -> None:
        """Connect and ``PING`` once (login included); no retry."""
        try:
            client = new_client(self.config)
            try:
                client.ping()
            finally:
                client.close()
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            where = f"redis sink {safe_url(self.config.url)}"
            raise SinkCheckFailed(f"{where}: PING failed: {type(exc).__name__}: {exc}") from exc

    def open(self, context: SinkContext) -> None:
        super().open(context)
        self._last_plan = None
        self._plans.clear()
        self._tables.clear()
        for schema in context.tables:
            self._plan(schema, " at start-up")
            self._remember(schema)
        self._metrics = metrics_for(context.metrics_registry, RedisMetrics)
        self.close()
        self.client = self._connect()
        self._delivery = Delivery(
            self.client,
            self._metrics,
            unlink=self.config.unlink,
            batch_commands=self.config.batch_commands,
            batch_interval=self.config.batch_interval,
            del_batch_keys=self.config.del_batch_keys,
            position=context.resume_ts,
        )
        self._writer = ModeWriter(self._delivery, self.config.null_token, context.cluster_id)
        self.latch.take()
        log.info(
            "redis sink open at commit_ts %d: %s%s, %d rules, %d of %d tables matched",
            context.resume_ts,
            safe_url(self.config.url),
            " (cluster)" if self.config.cluster else "",
            len(self.rules.rules),
            sum(1 for plan in self._plans.values() if plan.rules),
            len(context.tables),
        )

    def write_batch(self, events: Sequence[Event]) -> None:
        delivery = self.delivery
        for event in events:
            if isinstance(event, TxnEvent):
                self._write_txn(event)
            elif isinstance(event, DDLEvent):
                self._write_ddl(event)
            else:
                assert isinstance(event, ResolvedEvent)
                delivery.complete_through(event.commit_ts)
            if delivery.due():
                delivery.send(wait=False)  # its replies are read by the next send or the flush

    def latched(self, failure: SinkError) -> None:
        self._reset()
        self.warn(
            "failure",
            "%s; the checkpoint stays at commit_ts %d, the next flush fails and the unflushed "
            "events are written again",
            failure,
            self.delivery.durable,
        )

    def flush_batch(self) -> int:
        delivery = self.delivery
        delivery.send()
        assert self._metrics is not None
        self._metrics.durable_ts.set(delivery.durable)
        self._mirror(delivery.durable)
        return delivery.durable

    def recover(self, failure: SinkError) -> SinkError:
        self._reset()
        return SinkUnavailable(
            f"{failure}; the checkpoint stays at commit_ts {self.delivery.durable} and the unflushed "
            "events are written again"
        )

    def close(self) -> None:
        if self._delivery is not None:
            self._delivery.abandon()  # a pipeline still unanswered: its connection is closed
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except (redis.RedisError, RedisClusterException, OSError) as exc:
                log.warning("redis sink: closing the client: %s", exc)

    # -- helpers ----------------------------------------------------------------------

    def _reset(self) -> None:
        """After a failed pipeline: nothing waits; what was not acknowledged is written again."""
        self.delivery.reset()
        if self._writer is not None:
            self._writer.reset()

    @property
    def delivery(self) -> Delivery:
        if self._delivery is None:
            raise SinkError("redis sink: not open")
        return self._delivery

    def _connect(self) -> Client:
        where = f"connecting to {safe_url(self.config.url)}"
        assert self._metrics is not None
        try:
            client = new_client(self.config)
            client.ping()
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            raise client_failure(exc, where, self._metrics) from exc
        return client

    def _plan(self, schema: row_pb2.TableSchema, context: str = "") -> TablePlan:
        cached = self._plans.get(id(schema))
        if cached is not None and cached.schema is schema:
            return cached
        if len(self._plans) >= 4096:
            self._plans.clear()
        plan = TablePlan(
            schema,
            table_name(schema),
            tuple(column.name for column in schema.columns),
            key_positions(schema),
            self.rules.plan(schema, context),
        )
        self._plans[id(schema)] = plan
        return plan

    def _remember(self, schema: row_pb2.TableSchema) -> None:
        self._tables[(schema.db.casefold(), schema.table.casefold())] = schema

    def _write_txn(self, event: TxnEvent) -> None:
        delivery, writer = self.delivery, self._writer
        assert writer is not None
        limit = delivery.batch_commands
        plan: TablePlan | None = self._last_plan
        keys: list[str] = []  # invalidations of fast-path changes not yet queued (keeps their order)
        changes = event.changes()
        row = next(changes, None)
        pos = 0  # the change's index in the transaction
        while row is not None:
            if plan is None or row.table is not plan.schema:
                self._invalidate(keys, event.commit_ts, plan)
                plan = self._last_plan = self._plan(row.table)
            if not plan.rules:
                self._warn_ignored(plan)
            elif plan.invalidate_only:
                # this change and the ones of the same table after it, in one call
                row, handled = plan.invalidate_run(row, changes, keys, limit)
                pos += handled
                if len(keys) >= limit:
                    self._invalidate(keys, event.commit_ts, plan)
                    delivery.send(wait=False)  # a large transaction: its position moves only at its end
                continue
            else:
                writer.change(Change(event, pos, row, plan))
                if delivery.size >= limit:
                    delivery.send(wait=False)
            pos += 1
            row = next(changes, None)
        self._invalidate(keys, event.commit_ts, plan)
        writer.end_transaction(event)
        delivery.complete_through(event.commit_ts)

    def _warn_ignored(self, plan: TablePlan) -> None:
        """Once per table (and sink open): say that its changes are dropped because no rule matches."""
        name = plan.name
        if name in self._ignored:
            return
        self._ignored.add(name)
        patterns = ", ".join(f"{rule.db.text}.{rule.table.text}" for rule in self.rules.rules) or "none"
        log.warning(
            "redis sink: no rule matches table %s: its changes are ignored (the rules name %s)",
            name,
            patterns,
        )

    def _invalidate(self, keys: list[str], commit_ts: int, plan: TablePlan | None) -> None:
        """Queue the fast path's gathered invalidations, and empty ``keys``."""
        if keys and plan is not None:
            self.delivery.invalidate(keys, commit_ts, plan.name)
            keys.clear()

    def _write_ddl(self, event: DDLEvent) -> None:
        delivery = self.delivery
        delivery.send()  # everything before the DDL is applied first
        change = event.change
        context = f" after the DDL at commit_ts {event.commit_ts} ({event.query[:120]!r})"
        after_rules = self._plan(event.after, context).rules if event.after is not None else ()
        before_rules = self._plan(event.before).rules if event.before is not None else ()
        stale: list[KeyRenderer] = []
        if change.kind == SchemaChange.DROP_DATABASE:
            db = change.db.casefold()
            for (known_db, _), schema in list(self._tables.items()):
                if known_db == db:
                    stale += stale_keys(change.kind, self._plan(schema).rules, (), schema, None)
                    self._tables.pop((known_db, schema.table.casefold()), None)
        else:
            stale = stale_keys(change.kind, before_rules, after_rules, event.before, event.after)
            if event.before is not None:
                self._tables.pop((event.before.db.casefold(), event.before.table.casefold()), None)
        if event.after is not None:
            self._remember(event.after)
        if stale:
            self._delete_stale(event, stale)
        delivery.complete_through(event.commit_ts)

    def _delete_stale(self, event: DDLEvent, stale: list[KeyRenderer]) -> None:
        where = f"{event.change.db}.{event.change.table}" if event.change.table else event.change.db
        patterns = sorted({key.pattern() for key in stale})
        if not self.config.scan_on_ddl:
            log.warning(
                "redis sink: the DDL at commit_ts %d (%s) may leave keys of %s stale (patterns %s); "
                "scan-on-ddl is off, so they are kept",
                event.commit_ts,
                event.query[:120],
                where,
                ", ".join(patterns),
            )
            return
        delivery = self.delivery
        origin = Origin(event.commit_ts, where, "scan")
        deleted = 0
        for pattern in patterns:
            for key in delivery.scan(pattern):
                delivery.delete([key], origin)
                deleted += 1
                if delivery.size >= delivery.batch_commands:
                    delivery.send()
        delivery.send()
        log.info(
            "redis sink: the DDL at commit_ts %d (%s) left keys of %s stale: deleted %d keys matching %s",
            event.commit_ts,
            event.query[:120],
            where,
            deleted,
            ", ".join(patterns),
        )

    def _mirror(self, position: int) -> None:
        """Write the durable position to ``checkpoint-key`` (for operators; a failure is only logged)."""
        key = self.config.checkpoint_key
        if not key or position <= self._mirrored or self.client is None:
            return
        document = {
            "commit_ts": position,
            "cluster_id": self.context.cluster_id,
            "updated_ms": int(time.time() * 1000),
        }
        try:
            self.client.set(key, dumps(document))
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            assert self._metrics is not None
            self._metrics.errors.labels("mirror").inc()
            self.warn("mirror", "redis sink: writing checkpoint-key %s failed: %s", key, exc)
            return
        self._mirrored = position
