"""The ``Sink`` protocol every downstream implements.

The syncer drives a sink from one thread, in this order::

    sink.open(resume_ts)            # once; resume_ts = the checkpoint's commit_ts
    sink.write(events)              # many times; events in strictly increasing commit_ts
    position = sink.flush()         # often; also before every checkpoint save
    sink.close()                    # once, after a final flush on a clean stop

Contract:

- ``open(resume_ts)``: the drainer will next write the first event with
  ``commit_ts > resume_ts``. All state after a restart must be derived from
  ``resume_ts`` (and the downstream itself); a sink keeps no other memory of
  what it wrote. After a crash the events just above ``resume_ts`` may be
  written a second time: apply them idempotently or say in the sink's docs
  how duplicates look (e.g. Kafka: at-least-once, dedupe by commit_ts+key).
- ``write(events)``: may buffer. It must not reorder transactions that touch
  the same row, and must apply a :class:`DDLEvent` only after every earlier
  event is applied. It raises :class:`bridge.errors.BridgeError` subclasses;
  ``retriable`` ones are retried by the syncer with the same events after
  ``flush`` failed or ``write`` raised, non-retriable ones stop the drainer
  with the message (which must name the table and commit_ts, never values).
- ``flush() -> int``: makes everything written so far durable downstream and
  returns the highest commit_ts such that every event at or below it is
  durable (ResolvedEvent included). The checkpoint never moves past it.
- ``close()``: releases connections and files; no writes follow.

Sinks are synchronous on purpose: database drivers are, and the syncer runs
them on their own thread so pulling and merging continue meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from drainer.events import Event


class Sink(Protocol):
    name: str

    def open(self, resume_ts: int) -> None: ...

    def write(self, events: Sequence[Event]) -> None: ...

    def flush(self) -> int: ...

    def close(self) -> None: ...
