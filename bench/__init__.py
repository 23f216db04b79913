"""Benchmarks run by ``binlog-bridge bench NAME``.

Each module exposes ``add_arguments(parser)`` and ``run(args) -> dict``; the
command prints the returned dict as one JSON object on the last stdout line,
with at least ``name``, ``value``, ``unit``, ``ceiling`` and ``ratio``.
"""
