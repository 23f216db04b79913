"""Sinks by name: the ``[sink]`` table of the drainer's config picks them.

::

    [sink]
    type = "sqlite"               # or a list: ["sqlite", "file"]
    [sink.sqlite]                 # that sink's own table, handed to its constructor
    path = "downstream.db"

``type`` names an entry of :data:`SINKS`, or is ``"package.module:Class"``
for a sink class outside this package. Every sink class is constructed as
``cls(config_table, data_dir)``: ``config_table`` is its ``[sink.<type>]``
table (empty when absent; the sink checks its keys and raises
:class:`bridge.errors.ConfigError` naming ``sink.<type>.<key>``), ``data_dir``
the drainer's data dir, where a sink keeps files its config does not place
elsewhere. Modules are imported only when named, so a sink's optional
dependencies are needed only by drainers that use it.

With several types the drainer drives a :class:`FanOutSink`: every event goes
to every sink and the durable position is the lowest any of them reports.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from bridge.errors import BridgeError, ConfigError
from drainer.events import Event
from drainer.sinks.base import Sink

# Sink name -> "module:Class". Each sink's author adds its entry.
SINKS: dict[str, str] = {
    "sqlite": "drainer.sinks.sqlite:SQLiteSink",
    "file": "drainer.sinks.file:FileSink",
    "mysql": "drainer.sinks.mysql:MySQLSink",
    "kafka": "drainer.sinks.kafka:KafkaSink",
}


class SinkClass(Protocol):
    def __call__(self, config_table: Mapping[str, Any], data_dir: Path) -> Sink: ...


def sink_class(name: str) -> SinkClass:
    """The class ``name`` stands for; :class:`ConfigError` naming ``sink.type`` if none."""
    target = SINKS.get(name, name if ":" in name else "")
    if not target:
        raise ConfigError(f"sink.type: unknown sink {name!r}; known: {', '.join(sorted(SINKS))}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"sink.type: sink {name!r} cannot be loaded: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"sink.type: module {module_name} has no sink class {class_name}")
    return cast(SinkClass, cls)


def build_sink(types: Sequence[str], tables: Mapping[str, Mapping[str, Any]], data_dir: Path) -> Sink:
    """Construct the sinks ``types`` names (one, or a :class:`FanOutSink` of several)."""
    if not types:
        raise ConfigError('sink.type: name at least one sink, e.g. type = "sqlite"')
    unknown_tables = sorted(set(tables) - set(types))
    if unknown_tables:
        raise ConfigError(f"sink.{unknown_tables[0]}: a table for a sink that sink.type does not name")
    sinks = [sink_class(name)(tables.get(name, {}), data_dir) for name in types]
    return sinks[0] if len(sinks) == 1 else FanOutSink(sinks)


def give_schema_snapshot(sink: Sink, snapshot: bytes) -> None:
    """Hand the schema snapshot at the resume position to a sink that asks for it.

    Optional part of the protocol: a sink with ``set_schema_snapshot(snapshot:
    bytes)`` gets it before ``open`` (the :class:`drainer.schema.SchemaTracker`
    snapshot format), e.g. to know the tables that existed before it did.
    """
    setter = getattr(sink, "set_schema_snapshot", None)
    if callable(setter):
        setter(snapshot)


def give_cluster_id(sink: Sink, cluster_id: int) -> None:
    """Tell a sink that asks for it which cluster it replicates.

    Optional part of the protocol: a sink with ``set_cluster_id(cluster_id:
    int)`` gets it right after construction, before ``open`` (e.g. to key the
    progress rows it keeps in the downstream, or to name the source of the
    messages it publishes).
    """
    setter = getattr(sink, "set_cluster_id", None)
    if callable(setter):
        setter(cluster_id)


class FanOutSink:
    """Several sinks as one: each gets every call; ``flush`` is the lowest position."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self.name = "+".join(s.name for s in self.sinks)

    def set_schema_snapshot(self, snapshot: bytes) -> None:
        for sink in self.sinks:
            give_schema_snapshot(sink, snapshot)

    def set_cluster_id(self, cluster_id: int) -> None:
        for sink in self.sinks:
            give_cluster_id(sink, cluster_id)

    def open(self, resume_ts: int) -> None:
        for sink in self.sinks:
            sink.open(resume_ts)

    def write(self, events: Sequence[Event]) -> None:
        for sink in self.sinks:
            sink.write(events)

    def flush(self) -> int:
        return min(sink.flush() for sink in self.sinks)

    def close(self) -> None:
        failure: BridgeError | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except BridgeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
