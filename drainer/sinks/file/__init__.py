"""The ``file`` sink (:mod:`.sink`) and its binlog file format (:mod:`.binlogfile`), which the
relay log and ``binlog-bridge replay`` read too."""

from drainer.sinks.file.sink import FileSink

__all__ = ["FileSink"]
