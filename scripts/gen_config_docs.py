#!/usr/bin/env python3
"""Write docs/configuration.md from the config dataclasses.

Usage: python scripts/gen_config_docs.py [--check]

Every key of every service's configuration is documented from the dataclass
that validates it (its default and its ``help`` metadata), so the reference
cannot drift from the code; ``--check`` fails when the file is stale (a test
runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.cli.text import plain  # noqa: E402 - after ROOT is on the path

OUTPUT = ROOT / "docs" / "configuration.md"

# (title, "module:Class", where the keys live, intro)
SECTIONS: list[tuple[str, str, str, str]] = [
    (
        "binlog-bridge meta",
        "bridge.apps.meta.config:MetaConfig",
        "`binlog-bridge meta --config meta.toml`; flags override the file",
        "The timestamp oracle and node registry. Example: [examples/meta.toml](examples/meta.toml), "
        "[examples/meta-etcd.toml](examples/meta-etcd.toml).",
    ),
    (
        "binlog-bridge pump",
        "pump.config:PumpConfig",
        "`binlog-bridge pump --config pump.toml`; flags override the file",
        "A pump: stores binlogs durably, pairs and sorts them, serves drainers. "
        "Example: [examples/pump.toml](examples/pump.toml). "
        "Operations: [pump-operations.md](pump-operations.md).",
    ),
    (
        "binlog-bridge drainer",
        "drainer.config:DrainerConfig",
        "`binlog-bridge drainer --config drainer.toml`; flags override the file",
        "The drainer: merges the pumps by commit_ts and drives the sinks. "
        "Example: [examples/drainer.toml](examples/drainer.toml). Guide: [drainer.md](drainer.md).",
    ),
    (
        "sqlite sink",
        "drainer.sinks.sqlite.sink:SQLiteSinkConfig",
        'the drainer\'s `[sink]` table with `type = "sqlite"`',
        "The embedded SQL downstream. Guarantees and type mapping: [sinks.md](sinks.md).",
    ),
    (
        "file sink",
        "drainer.sinks.file.sink:FileSinkConfig",
        'the drainer\'s `[sink]` table with `type = "file"`',
        "Binlog files for backup and `binlog-bridge replay`. Format: [sinks.md](sinks.md).",
    ),
    (
        "mysql sink",
        "drainer.sinks.mysql.config:MySQLSinkConfig",
        'the drainer\'s `[sink]` table with `type = "mysql"`, keys in `[sink.mysql]`',
        "MySQL, MariaDB and TiDB downstreams: parallel workers with conflict detection, multi-row "
        "batches, safe mode, DDL. Guide: [mysql-sink.md](mysql-sink.md). "
        "Example: [examples/drainer-mysql.toml](examples/drainer-mysql.toml).",
    ),
    (
        "mysql checkpoint",
        "drainer.checkpoint.mysql:MySQLCheckpointConfig",
        'the drainer\'s `[checkpoint]` table with `type = "mysql"`',
        "The checkpoint as a row of a table in the MySQL downstream (one row per cluster id, "
        "with the `consistent` flag). Operations: [drainer-recovery.md](drainer-recovery.md).",
    ),
    (
        "kafka sink",
        "drainer.sinks.kafka.config:KafkaSinkConfig",
        'the drainer\'s `[sink]` table with `type = "kafka"`, keys in `[sink.kafka]` (`producer` and '
        "`schema-registry` are subtables: `[sink.kafka.producer]`, `[sink.kafka.schema-registry]`)",
        "Avro change topics for Kafka consumers: one topic per table, the DDL topic, resolved-ts "
        "watermarks, delivery-confirmed flushes. Guide: [kafka-sink.md](kafka-sink.md). "
        "Example: [examples/drainer-kafka.toml](examples/drainer-kafka.toml).",
    ),
    (
        "redis sink",
        "drainer.sinks.redis.config:RedisSinkConfig",
        'the drainer\'s `[sink]` table with `type = "redis"`, keys in `[sink.redis]`, rules in '
        "`[[sink.redis.rules]]`",
        "Cache invalidation, publish, streams and cache warming in Redis or Redis Cluster. "
        "Guide: [redis-sink.md](redis-sink.md). "
        "Example: [examples/drainer-redis.toml](examples/drainer-redis.toml).",
    ),
    (
        "binlog-bridge capture",
        "bridge.apps.capture.config:CaptureFile",
        "`binlog-bridge capture --config capture.toml`",
        "Capture from an existing MySQL/MariaDB row binlog into the pumps. "
        "Guide: [capture.md](capture.md). Example: [examples/capture.toml](examples/capture.toml).",
    ),
    (
        "MySQL connections",
        "bridge.mysql:MySQLTimeouts",
        "the `?connect_timeout=`, `?read_timeout=` and `?write_timeout=` parameters (seconds) of any "
        "`mysql://` DSN",
        "The bounded waits of every MySQL client of the product: the mysql sink, checkpoint and relay, "
        "the pump's resolver, the producers, `capture`, `diff` and `consume --apply`. These are the "
        "defaults of a client that sets none of its own (the mysql sink's and checkpoint's keys above, "
        "the resolver's `timeout`); a DSN parameter overrides both. A read timeout turns a downstream "
        "that stops answering (a half-open link) into a retried error instead of a hang.",
    ),
    (
        "Pump client (producers)",
        "bridge.pumpclient.config:PumpClientConfig",
        "a `[pump-client]` table in a producer's TOML, or `PumpClientConfig(...)` in code",
        "How a producer routes, retries, probes and batches binlogs. "
        "Example: [examples/pump-client.toml](examples/pump-client.toml).",
    ),
    (
        "python -m spark_consumers index / snapshot",
        "spark_consumers.config:JobSettings",
        "`python -m spark_consumers index --config job.toml`; flags (same names) override the file",
        "The Spark jobs over the change topics. Besides these keys, the tables `[text-fields]` "
        "(full-text columns per `db.table`), `[kafka]` (librdkafka settings) and `[spark]` (Spark "
        "settings) take keys of your own. Guide: [spark-consumers.md](spark-consumers.md).",
    ),
]

HEADER = """# Configuration reference

Generated from the configuration classes by `python scripts/gen_config_docs.py`;
do not edit by hand. Every service reads one TOML file; keys are written with
dashes (`data-dir`), tables group related keys (`[tso]`), and an unknown key or
an invalid value stops the service at start with a message naming the key.

Durations are a number of seconds or a string with a unit: `"500ms"`, `"3s"`,
`"10m"`, `"1h"`, `"7d"`. Keys marked *secret* are never logged.

A `mysql://` DSN takes parameters after `?`, TLS among them (`ssl-mode`,
`ssl-ca`, `ssl-cert`, `ssl-key`): see [producers.md](producers.md#mysql-dsn-parameters).
"""


def _type_name(tp: Any, field: dataclasses.Field[Any]) -> str:
    if field.metadata.get("duration"):
        return "duration"
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0], field)}"
    if origin is dict:
        return "table"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg, field) for arg in typing.get_args(tp))
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, str(tp))


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if field.metadata.get("duration"):
        return f"`{value:g}s`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`"


def _rows(cls: type[Any], prefix: str) -> tuple[list[str], list[tuple[str, type[Any]]]]:
    rows, tables = [], []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if not field.init:
            continue  # filled by the loader (a sink's own table, the checkpoint type's keys): not a key
        key = field.name.replace("_", "-")
        tp = hints[field.name]
        if dataclasses.is_dataclass(tp):
            tables.append((f"{prefix}{key}", tp))
            continue
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            tables.append((f"[{prefix}{key}]", item))  # an array of tables: [[sink.redis.rules]]
            continue
        help_text = plain(field.metadata.get("help", ""))
        if not help_text:
            raise SystemExit(
                f"{cls.__module__}.{cls.__name__}.{field.name}: no help (every key says what it means)"
            )
        if field.metadata.get("secret"):
            help_text += " *(secret)*"
        rows.append(f"| `{key}` | {_type_name(tp, field)} | {_default(field)} | {help_text} |")
    return rows, tables


def _table(cls: type[Any], prefix: str = "") -> list[str]:
    rows, tables = _rows(cls, prefix)
    out: list[str] = []
    if rows:
        out += ["| key | type | default | meaning |", "|---|---|---|---|", *rows, ""]
    for name, sub in tables:
        doc = plain((sub.__doc__ or "").strip().splitlines()[0]) if sub.__doc__ else ""
        doc = doc.removeprefix(f"`[{name}]`").lstrip(":. ")  # the heading names the table already
        doc = doc[:1].upper() + doc[1:]
        out += [f"#### `[{name}]`", "", *([doc, ""] if doc else []), *_table(sub, f"{name}.")]
    return out


def render() -> str:
    out = [HEADER]
    for title, target, where, intro in SECTIONS:
        module, _, name = target.partition(":")
        cls = getattr(importlib.import_module(module), name)
        out += [f"## {title}", "", intro, "", f"Where: {where}.", "", *_table(cls)]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="write docs/configuration.md")
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print("docs/configuration.md is stale; run: python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        print("docs/configuration.md is up to date")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
