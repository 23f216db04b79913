"""``binlog-bridge consume``: read the Kafka sink's change topics; print them or apply them.

- :mod:`bridge.apps.consume.items` — the decoded messages (row changes, DDL events,
  watermarks) as plain values.
- :mod:`bridge.apps.consume.reader` — the Kafka side: topic discovery, partition
  assignment, both Avro encodings (via :class:`bridge.avro.Decoder`).
- :mod:`bridge.apps.consume.ordering` — the resolved-ts consumer contract: buffer,
  de-duplicate by (topic, commit_ts, pos), release in (commit_ts, pos) order
  once every assigned partition's watermark passes.
- :mod:`bridge.apps.consume.apply` — turns released items into the drainer's own
  events and feeds a SQL sink (sqlite or mysql).
- :mod:`bridge.apps.consume.runner` — the loops the CLI runs.

docs/consume.md describes the consumer contract and the command.
"""
