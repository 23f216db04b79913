"""Sinks by name: the ``[sink]`` table of the drainer's config picks them.

::

    [sink]
    type = "sqlite"               # or a list: ["sqlite", "file"]
    [sink.sqlite]                 # that sink's own table, handed to its constructor
    path = "downstream.db"

``type`` names a sink registered in the entry-point group
``binlog_bridge.sinks`` (pyproject.toml: ``mysql =
"drainer.sinks.mysql:MySQLSink"``; a package adding a sink adds one line
there), or is ``"package.module:Class"`` for a sink class registered nowhere.
Every sink class is constructed as ``cls(config, data_dir)``: ``config`` is
its ``[sink.<type>]`` table (empty when absent; the sink checks its keys and
raises :class:`bridge.errors.ConfigError` naming ``sink.<type>.<key>``),
``data_dir`` the drainer's data dir, where a sink keeps files its config
does not place elsewhere. Modules are imported only when named, so a sink's
optional dependencies are needed only by drainers that use it.

With several types the drainer drives a :class:`FanOutSink`: every event goes
to every sink and the durable position is the lowest any of them reports. A
transaction's rows are decoded once for all of them (:class:`DecodedOnce`),
unless it is too large to hold decoded.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, cast

from bridge.errors import BridgeError, ConfigError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import Event, RowChange, TxnEvent

GROUP = "binlog_bridge.sinks"
# A write's transactions are decoded once for every sink up to these many rows (one transaction,
# all of a write): beyond, each sink decodes on its own (the contract: a large transaction is
# never held decoded).
SHARED_TXN_ROWS = 4096
SHARED_WRITE_ROWS = 65536


class SinkClass(Protocol):
    def __call__(self, config: Mapping[str, Any], data_dir: Path) -> Sink: ...


def registered() -> dict[str, str]:
    """Sink name -> ``"module:Class"``, as the installed packages register them."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def sink_class(name: str) -> SinkClass:
    """The class ``name`` stands for; :class:`ConfigError` naming ``sink.type`` if none."""
    known = registered()
    target = known.get(name, name if ":" in name else "")
    if not target:
        raise ConfigError(f"sink.type: unknown sink {name!r}; known: {', '.join(sorted(known))}")
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


class FanOutSink(Sink):
    """Several sinks as one: each gets every call; ``flush`` is the lowest position.

    ``open`` opens the members in order; when one raises, the members before it stay open and
    the driver's next ``open`` opens only those still closed (a member is opened again only
    after ``close``, as the contract says)."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self.name = "+".join(s.name for s in self.sinks)
        self._opened: list[Sink] = []

    def check(self) -> None:
        for sink in self.sinks:
            sink.check()

    def open(self, context: SinkContext) -> None:
        super().open(context)
        for sink in self.sinks:
            if not any(sink is opened for opened in self._opened):
                sink.open(context)
                self._opened.append(sink)

    def write(self, events: Sequence[Event]) -> None:
        shared: list[DecodedOnce] = []
        budget = SHARED_WRITE_ROWS
        fanned: list[Event] = []
        for event in events:
            if isinstance(event, TxnEvent) and event.row_count <= min(budget, SHARED_TXN_ROWS):
                budget -= event.row_count
                once = DecodedOnce(event.decode)
                shared.append(once)
                event = dataclasses.replace(event, decode=once)
            fanned.append(event)
        try:
            for sink in self.sinks:
                sink.write(fanned)
        finally:
            for once in shared:
                once.release()

    def flush(self) -> int:
        return min(sink.flush() for sink in self.sinks)

    def close(self) -> None:
        failure: BridgeError | None = None
        self._opened = []
        for sink in self.sinks:
            try:
                sink.close()
            except BridgeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


class DecodedOnce:
    """A transaction's decode, run once and its rows kept until :meth:`release`: what the sinks of
    a :class:`FanOutSink` share. A decode that fails is run again by the next caller (and fails
    the same way)."""

    __slots__ = ("_decode", "_rows")

    def __init__(self, decode: Callable[[], Iterator[RowChange]]) -> None:
        self._decode = decode
        self._rows: list[RowChange] | None = None

    def __call__(self) -> Iterator[RowChange]:
        rows = self._rows
        if rows is None:
            rows = self._rows = list(self._decode())
        return iter(rows)

    def release(self) -> None:
        self._rows = None
