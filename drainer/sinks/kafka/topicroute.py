"""``[[sink.kafka.topic-route]]``: the kafka sink's topic names by the rule syntax of ``[[route]]``.

::

    [[sink.kafka.topic-route]]
    schema-pattern = "main"          # * = any run of characters, ? = one; case-insensitive
    table-pattern = "order*"         # optional: without it every table of the database
    topic = "{prefix}.shop_b.{table}"

``[[route]]`` (:mod:`drainer.sync.route`) renames tables for every sink, the
envelope's ``source`` included; these rules only choose the topic of a table
(what ``topic-template`` does for the tables no rule matches), so a consumer
still sees the upstream names in each message. The first matching rule
decides. Placeholders: ``{prefix}`` (``sink.kafka.prefix``), ``{schema}`` and
``{table}``, the names after ``[[route]]``, with every character a topic
name cannot hold replaced by ``_``. Each table keeps a topic of its own (the
sink's Avro subjects and ``consume`` are per table): a rule whose patterns
can match several tables must use ``{table}`` (and ``{schema}`` when its
``schema-pattern`` can match several databases).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.config import build
from bridge.errors import ConfigError
from bridge.tablepatterns import PLACEHOLDER, TablePatterns, TablePatternsConfig, compile_pattern


@dataclass
class TopicRouteConfig(TablePatternsConfig):
    """One ``[[sink.kafka.topic-route]]`` rule: the topic of the tables whose names match."""

    topic: str = field(
        default="",
        metadata={
            "help": "the tables' topic; {prefix}, {schema} and {table} (names after [[route]]) (required)"
        },
    )


_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class TopicRule(TablePatterns):
    """One parsed ``[[sink.kafka.topic-route]]``; ``where`` names it in errors."""

    where: str
    schema_pattern: re.Pattern[str]
    table_pattern: re.Pattern[str] | None
    topic: str


class TopicRouter:
    """The kafka sink's topic rules: the first rule matching ``db.table`` names its topic.

    Same patterns as ``[[route]]``; the topic's placeholders are ``{prefix}`` (the sink's),
    ``{schema}`` and ``{table}``, the names with every character a topic name cannot hold
    replaced by ``_``. A table no rule matches gets ``topic-template``'s topic."""

    def __init__(self, rules: Sequence[TopicRule] = ()) -> None:
        self.rules = tuple(rules)

    @classmethod
    def parse(cls, entries: object, prefix: str) -> tuple[list[TopicRouteConfig], TopicRouter]:
        """From the TOML value of ``sink.kafka.topic-route``; errors name the rule."""
        key = "sink.kafka.topic-route"
        if entries is None:
            return [], cls()
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            raise ConfigError(f"{key}: expected an array of tables [[{key}]], got {entries!r}")
        configs = [build(TopicRouteConfig, entry, prefix=f"{key}[{i}].") for i, entry in enumerate(entries)]
        rules = []
        for i, config in enumerate(configs):
            where = f"{key}[{i}]"
            for name, value in (("schema-pattern", config.schema_pattern), ("topic", config.topic)):
                if not value:
                    raise ConfigError(f"{where}.{name}: required in every [[{key}]]")
            _check_topic(config.topic, f"{where}.topic", prefix)
            table = config.table_pattern
            for name, pattern, placeholder in (
                ("table-pattern", table or "*", "{table}"),
                ("schema-pattern", config.schema_pattern, "{schema}"),
            ):
                if any(c in pattern for c in "*?") and placeholder not in config.topic:
                    raise ConfigError(
                        f"{where}.topic: {name} {pattern!r} can match several names, so the topic must "
                        f"use {placeholder} (each table keeps a topic of its own)"
                    )
            rules.append(
                TopicRule(
                    where,
                    compile_pattern(config.schema_pattern, f"{where}.schema-pattern"),
                    compile_pattern(table, f"{where}.table-pattern") if table else None,
                    config.topic,
                )
            )
        return configs, cls(rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def topic(self, db: str, table: str, prefix: str, sanitize: Callable[[str], str]) -> str | None:
        """The topic of ``db.table`` by the first matching rule; None when no rule matches."""
        for rule in self.rules:
            if rule.matches(db, table):
                return _render_topic(rule.topic, prefix, sanitize(db), sanitize(table))
        return None


def _render_topic(template: str, prefix: str, schema: str, table: str) -> str:
    values = {"prefix": prefix, "schema": schema, "table": table}
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _check_topic(template: str, key: str, prefix: str) -> None:
    for name in PLACEHOLDER.findall(template):
        if name not in ("prefix", "schema", "table"):
            known = "{prefix}, {schema}, {table}"
            raise ConfigError(f"{key}: unknown placeholder {{{name}}} in {template!r} (use {known})")
    sample = _render_topic(template, prefix, "d", "t")
    if not _TOPIC_CHARS.match(sample):
        raise ConfigError(
            f"{key}: the text around the placeholders must be A-Z a-z 0-9 . _ -, got {template!r}"
        )
    if sample in (f"{prefix}._ddl", f"{prefix}._schemas"):
        raise ConfigError(f"{key}: {template!r} names the sink's DDL or schemas topic")
