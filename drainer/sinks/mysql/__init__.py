"""The ``mysql`` sink: MySQL, MariaDB or TiDB downstreams (docs/mysql-sink.md)."""

from drainer.sinks.mysql.sink import MySQLSink

__all__ = ["MySQLSink"]
