"""``binlog-bridge load``: the workload generator on top of the transactional writer.

``options.py`` (flags and the mix), ``workload.py`` (tables, generated rows,
worker key spaces), ``plans.py`` (one planner per transaction kind),
``schema_changes.py`` (the DDL thread), ``runner.py`` (threads, retries,
stopping), ``stats.py`` (counters, progress line, summary).
"""
