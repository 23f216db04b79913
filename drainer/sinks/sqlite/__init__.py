"""The ``sqlite`` sink (:mod:`.sink`) over one SQLite file per upstream database (:mod:`.store`)."""

from drainer.sinks.sqlite.sink import SQLiteSink

__all__ = ["SQLiteSink"]
