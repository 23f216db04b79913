"""Sinks: where the drainer's ordered change stream goes. One package per sink (``sqlite``,
``file``, ``mysql``, ``kafka``, ``redis``), each behind :class:`bridge.sink.contract.Sink` and
registered by name in pyproject.toml (entry-point group ``binlog_bridge.sinks``); ``sql`` is
the SQL translation the SQL sinks share."""
