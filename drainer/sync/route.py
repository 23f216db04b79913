"""``[[route]]``: rename databases and tables on the way to the sink (TiDB DM / TiCDC style).

::

    [[route]]
    schema-pattern = "main"      # * = any run of characters, ? = one; case-insensitive
    table-pattern = "*"          # optional: without it the rule renames the database only
    target-schema = "shop_b"     # placeholders {schema} and {table}: the upstream names
    target-table = "{table}"     # optional (default "{table}": the name is kept)

The first rule (in file order) whose patterns match a table renames it; a
table no rule matches keeps its name. A database-level DDL (CREATE/DROP
DATABASE) is renamed by the first rule whose ``schema-pattern`` matches and
whose ``target-schema`` does not use ``{table}``, rules without a
``table-pattern`` before those with one.

Routing is one event transformation (:class:`RoutingSink`, wrapped around
the drainer's sink, inside a relay log): the sink is opened with the routed
tables and schema snapshot, every row change carries its table's routed
schema, and a DDL's ``SchemaChange`` (database, table, a rename's old name,
the resulting schema), its schemas before and after, its query text (the
statement's target) and its binlog payload say the routed names. So every
sink sees routed names: the SQL sinks write to the routed tables, the Kafka
sink names its topics from them (``topic-template``'s ``{db}`` and
``{table}``), Redis key templates see them as ``{db}``/``{table}``. Filters
and ``[skip]`` rules match the upstream names (they run before routing); the
schema tracker and the checkpoint keep the upstream names, so adding or
changing a rule needs no new checkpoint. A relay log stores the binlog as
pulled, before routing. A routed transaction keeps its binlog bytes as pulled
(``payload`` and a chunked transaction's ``parts``: rows by table id, no
names) and loses ``raw`` (the undecoded changes carry the upstream schemas),
so a sink decodes its routed rows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.binlog import parse_binlog
from bridge.config import build
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import DDLEvent, Event, RowChange, TxnEvent
from bridge.sink.schema import SchemaTracker, SchemaTrackError
from bridge.tablepatterns import PLACEHOLDER, TablePatterns, TablePatternsConfig, compile_pattern

log = logging.getLogger(__name__)

SchemaChange = row_pb2.SchemaChange


def _check_target(template: str, key: str) -> None:
    if not template:
        raise ConfigError(f"{key}: must not be empty")
    for name in PLACEHOLDER.findall(template):
        if name not in ("schema", "table"):
            raise ConfigError(
                f"{key}: unknown placeholder {{{name}}} in {template!r} (use {{schema}}, {{table}})"
            )
    if "{" in PLACEHOLDER.sub("", template) or "}" in PLACEHOLDER.sub("", template):
        raise ConfigError(f"{key}: unbalanced braces in {template!r}")


def _render(template: str, schema: str, table: str) -> str:
    return PLACEHOLDER.sub(lambda m: schema if m.group(1) == "schema" else table, template)


@dataclass
class RouteConfig(TablePatternsConfig):
    """One ``[[route]]`` rule: tables whose names match go to the target names (drainer.sync.route)."""

    target_schema: str = field(
        default="",
        metadata={"help": "downstream database; {schema} and {table} are the upstream names (required)"},
    )
    target_table: str = field(
        default="{table}", metadata={"help": "downstream table; {schema} and {table} as above"}
    )


@dataclass(frozen=True)
class RouteRule(TablePatterns):
    """One ``[[route]]`` table; ``where`` names it in errors and logs (``route[0]``)."""

    where: str
    schema_pattern: re.Pattern[str]
    table_pattern: re.Pattern[str] | None
    target_schema: str
    target_table: str

    @classmethod
    def from_config(cls, config: RouteConfig, index: int) -> RouteRule:
        where = f"route[{index}]"
        for key, value in (
            ("schema-pattern", config.schema_pattern),
            ("target-schema", config.target_schema),
        ):
            if not value:
                raise ConfigError(f"{where}.{key}: required in every [[route]]")
        _check_target(config.target_schema, f"{where}.target-schema")
        _check_target(config.target_table, f"{where}.target-table")
        table_pattern = config.table_pattern
        return cls(
            where,
            compile_pattern(config.schema_pattern, f"{where}.schema-pattern"),
            compile_pattern(table_pattern, f"{where}.table-pattern") if table_pattern else None,
            config.target_schema,
            config.target_table,
        )

    def target(self, db: str, table: str) -> tuple[str, str]:
        return _render(self.target_schema, db, table), _render(self.target_table, db, table)


class Router:
    """The ``[[route]]`` rules in order; see the module docstring."""

    def __init__(self, rules: Sequence[RouteRule] = ()) -> None:
        self.rules = tuple(rules)
        self._cache: dict[tuple[str, str], tuple[str, str]] = {}
        self._schemas: dict[int, tuple[row_pb2.TableSchema, row_pb2.TableSchema]] = {}

    @classmethod
    def from_config(cls, configs: Sequence[RouteConfig]) -> Router:
        return cls([RouteRule.from_config(config, i) for i, config in enumerate(configs)])

    def __repr__(self) -> str:
        return f"Router({len(self.rules)} rules)"

    def __bool__(self) -> bool:
        return bool(self.rules)

    def table(self, db: str, table: str) -> tuple[str, str]:
        """Where ``db.table`` goes (itself when no rule matches)."""
        key = (db, table)
        routed = self._cache.get(key)
        if routed is None:
            routed = next((r.target(db, table) for r in self.rules if r.matches(db, table)), key)
            if len(self._cache) < 100_000:
                self._cache[key] = routed
        return routed

    def database(self, db: str) -> str:
        """Where a database-level DDL of ``db`` goes."""
        schema_rules = [rule for rule in self.rules if rule.table_pattern is None]
        for rule in schema_rules + [rule for rule in self.rules if rule.table_pattern is not None]:
            if rule.schema_pattern.fullmatch(db) is not None and "{table}" not in rule.target_schema:
                return _render(rule.target_schema, db, "")
        return db

    def schema(self, schema: row_pb2.TableSchema) -> row_pb2.TableSchema:
        """``schema`` under its routed name (the same object when the name stays).

        One routed object per schema object, across events: sinks cache a table's SQL by the
        schema object's identity (:meth:`drainer.sinks.sql.sql.Translator.table`)."""
        hit = self._schemas.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        db, table = self.table(schema.db, schema.table)
        routed = schema
        if (db, table) != (schema.db, schema.table):
            routed = row_pb2.TableSchema()
            routed.CopyFrom(schema)
            routed.db, routed.table = db, table
        if len(self._schemas) >= 10_000:
            self._schemas.clear()
        self._schemas[id(schema)] = (schema, routed)  # holds ``schema``: its id is not reused meanwhile
        return routed

    def change(self, change: row_pb2.SchemaChange) -> row_pb2.SchemaChange:
        routed = row_pb2.SchemaChange()
        routed.CopyFrom(change)
        if not change.table:
            routed.db = self.database(change.db)
            return routed
        routed.db, routed.table = self.table(change.db, change.table)
        if change.old_table:
            routed.old_db, routed.old_table = self.table(change.old_db, change.old_table)
        if change.HasField("table_schema"):
            routed.table_schema.db, routed.table_schema.table = routed.db, routed.table
        return routed

    def snapshot(self, snapshot: bytes) -> bytes:
        """A schema snapshot with every table (and database) under its routed name."""
        if not snapshot:
            return snapshot
        routed = SchemaTracker()
        for change in SchemaTracker.restore(snapshot).changes():
            target = self.change(change)
            if change.table and routed.find(target.db, target.table) is not None:
                raise ConfigError(
                    f"route: {change.db}.{change.table} and another table both route to "
                    f"{target.db}.{target.table}; the tables of a sink must keep distinct names"
                )
            try:
                if not change.table and target.db in routed.databases:
                    continue
                routed.apply(target)
            except SchemaTrackError as exc:
                raise ConfigError(f"route: {exc}") from None
        return routed.snapshot()


def parse_routes(entries: object) -> list[RouteConfig]:
    """The ``[[route]]`` array of the drainer's TOML; errors name the rule (``route[1].target-schema``)."""
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ConfigError(f"route: expected an array of tables [[route]], got {entries!r}")
    configs = [build(RouteConfig, entry, prefix=f"route[{i}].") for i, entry in enumerate(entries)]
    Router.from_config(configs)  # checks every rule
    return configs


# The statement target of the DDL a binlog carries: CREATE/ALTER/DROP/TRUNCATE TABLE and
# CREATE/DROP DATABASE name one (db.)table or database after their keywords.
_NAME = r"(?:`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\"|\[[^\]]+\]|[\w$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_TABLE_HEAD = re.compile(
    r"^(\s*(?:CREATE\s+(?:TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?"
    r"|ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|DROP\s+TABLE(?:\s+IF\s+EXISTS)?|TRUNCATE(?:\s+TABLE)?"
    r"|CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+" + _NAME + r"\s+ON)\s+)(" + _QUALIFIED + ")",
    re.IGNORECASE,
)
_DB_HEAD = re.compile(
    r"^(\s*(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)(?:\s+IF\s+(?:NOT\s+)?EXISTS)?\s+)(" + _NAME + ")",
    re.IGNORECASE,
)
_RENAME_HEAD = re.compile(
    r"^(\s*(?:RENAME\s+TABLE|ALTER\s+TABLE)\s+)("
    + _QUALIFIED
    + r")(\s+(?:RENAME\s+(?:TO\s+|AS\s+)?|TO\s+))("
    + _QUALIFIED
    + ")",
    re.IGNORECASE,
)


def _quote(db: str, table: str = "") -> str:
    names = [db, table] if table else [db]
    return ".".join("`" + name.replace("`", "``") + "`" for name in names)


def rewrite_query(query: str, change: row_pb2.SchemaChange, routed: row_pb2.SchemaChange) -> str:
    """``query`` naming ``routed``'s target instead of ``change``'s (unchanged when the names stay or
    the statement's shape is not one this knows)."""
    if (change.db, change.table, change.old_db, change.old_table) == (
        routed.db,
        routed.table,
        routed.old_db,
        routed.old_table,
    ):
        return query
    if not change.table:
        return _DB_HEAD.sub(lambda m: m.group(1) + _quote(routed.db), query, count=1)
    if change.kind == SchemaChange.RENAME_TABLE:
        return _RENAME_HEAD.sub(
            lambda m: (
                m.group(1)
                + _quote(routed.old_db, routed.old_table)
                + m.group(3)
                + _quote(routed.db, routed.table)
            ),
            query,
            count=1,
        )
    return _TABLE_HEAD.sub(lambda m: m.group(1) + _quote(routed.db, routed.table), query, count=1)


class _RoutedRows:
    """A TxnEvent's decode closure with every row change's table routed."""

    __slots__ = ("_decode", "_router")

    def __init__(self, event: TxnEvent, router: Router) -> None:
        self._decode = event.decode
        self._router = router

    def __call__(self) -> Iterator[RowChange]:
        route = self._router.schema
        pair: tuple[row_pb2.TableSchema, row_pb2.TableSchema] | None = None
        for change in self._decode():
            if pair is None or pair[0] is not change.table:  # consecutive rows mostly share a table
                pair = (change.table, route(change.table))
            routed = pair[1]
            if routed is change.table:
                yield change
            else:
                yield RowChange(change.kind, routed, change.before, change.after, change.snapshot)


class RoutingSink(Sink):
    """Hands ``inner`` every event (and the context) with routed names; see the module docstring."""

    def __init__(self, inner: Sink, router: Router) -> None:
        self.inner = inner
        self.router = router
        self.name = inner.name

    def check(self) -> None:
        self.inner.check()

    def open(self, context: SinkContext) -> None:
        super().open(context)
        self.inner.open(route_context(context, self.router))

    def write(self, events: Sequence[Event]) -> None:
        self.inner.write([route_event(event, self.router) for event in events])

    def flush(self) -> int:
        return self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # status and metrics of the sink routed to
        return getattr(self.inner, name)


def route_context(context: SinkContext, router: Router) -> SinkContext:
    return SinkContext(
        resume_ts=context.resume_ts,
        cluster_id=context.cluster_id,
        tables=tuple(router.schema(schema) for schema in context.tables),
        schema_snapshot=router.snapshot(context.schema_snapshot),
        safe_mode=context.safe_mode,
        data_dir=context.data_dir,
        metrics_registry=context.metrics_registry,
    )


def route_event(event: Event, router: Router) -> Event:
    """``event`` with routed names (the same event when it has none to route)."""
    if isinstance(event, TxnEvent):
        # the binlog bytes (payload, a chunked transaction's parts) stay as pulled; raw is
        # dropped (its changes carry the upstream schemas), so sinks decode the routed rows
        return TxnEvent(
            event.start_ts,
            event.commit_ts,
            event.payload,
            _RoutedRows(event, router),
            event.row_count,
            parts=event.parts,
        )
    if isinstance(event, DDLEvent):
        return _route_ddl(event, router)
    return event


def _route_ddl(event: DDLEvent, router: Router) -> DDLEvent:
    change = router.change(event.change)
    query = rewrite_query(event.query, event.change, change)
    binlog = parse_binlog(event.payload)
    binlog.ddl_query = query.encode("utf-8")
    binlog.ddl_schema_change = change.SerializeToString()
    if query != event.query or change != event.change:
        log.debug(
            "route: DDL at commit_ts %d goes to %s: %s",
            event.commit_ts,
            _quote(change.db, change.table),
            query,
        )
    return DDLEvent(
        event.start_ts,
        event.commit_ts,
        binlog.SerializeToString(),
        query,
        change,
        None if event.before is None else router.schema(event.before),
        None if event.after is None else router.schema(event.after),
    )


def routed(sink: Sink, router: Router) -> Sink:
    """``sink`` behind ``router`` (itself when there are no rules)."""
    return RoutingSink(sink, router) if router else sink
