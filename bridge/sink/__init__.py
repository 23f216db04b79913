"""The sink contract every consumer of the change stream may import.

- :mod:`bridge.sink.events`: the change events (rows with before and after
  images, DDL with the table's schema before and after, resolved ts);
- :mod:`bridge.sink.contract`: the :class:`~bridge.sink.contract.Sink` base
  class and the :class:`~bridge.sink.contract.SinkContext` it is opened with;
- :mod:`bridge.sink.errors`: the errors a sink raises;
- :mod:`bridge.sink.registry`: sinks by name (entry-point group
  ``binlog_bridge.sinks``) and the fan-out of several;
- :mod:`bridge.sink.driver`: the one driver (retries, re-writes, durable position);
- :mod:`bridge.sink.schema`: the schema tracker and its snapshot format.

See docs/sinks.md for adding a sink.
"""
