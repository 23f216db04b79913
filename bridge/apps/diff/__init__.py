"""``binlog-bridge diff``: does a downstream equal its upstream, table by table?

Library use (the demo and the end-to-end tests call it)::

    from bridge.apps.diff import diff
    report = diff("sqlite:var/up.db", "sqlite:var/drainer-1/sqlite", tables=["main.t"])
    assert report.equal, "\\n".join(report.lines())

How tables are compared: :mod:`bridge.apps.diff.compare`; how values from
different databases are made comparable: :mod:`bridge.apps.diff.normalize`; which
DSNs are understood: :mod:`bridge.apps.diff.open`; which tables are skipped:
:mod:`bridge.apps.diff.sources`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from bridge.apps.diff.compare import DiffOptions, Progress, compare_table
from bridge.apps.diff.open import open_source
from bridge.apps.diff.report import DiffReport, TableReport
from bridge.apps.diff.sources import NothingToCompareError, Source

__all__ = ["DiffOptions", "DiffReport", "NothingToCompareError", "TableReport", "diff", "diff_sources"]

Pair = tuple[str, tuple[str, str] | None, tuple[str, str] | None]


def diff(
    upstream: str,
    downstream: str,
    tables: Sequence[str] | None = None,
    *,
    chunk_size: int = 10_000,
    max_examples: int = 10,
    progress: Progress | None = None,
    table_done: Callable[[TableReport], None] | None = None,
) -> DiffReport:
    """Compare the tables of two databases given by DSN; ``tables`` limits it (``db.t`` or ``t``).

    Raises :class:`NothingToCompareError` when a ``tables`` entry matches no
    table on either side or when there is no table to compare at all, and
    :class:`~bridge.apps.diff.sources.DiffSourceError` when a side cannot be
    read (a missing SQLite file, a MySQL database that does not exist).
    ``progress`` gets a line now and then while a large table is read;
    ``table_done`` gets each table's report as soon as it is compared.
    """
    options = DiffOptions(
        chunk_size=chunk_size, max_examples=max_examples, progress=progress, table_done=table_done
    )
    up = open_source(upstream, "--upstream")
    try:
        down = open_source(downstream, "--downstream")
        try:
            return diff_sources(up, down, tables, options)
        finally:
            down.close()
    finally:
        up.close()


def diff_sources(
    up: Source, down: Source, tables: Sequence[str] | None = None, options: DiffOptions | None = None
) -> DiffReport:
    """Compare ``up`` with ``down``; see :func:`diff`. A table on one side only is
    reported with that side's real row count (and 0 for the side without it)."""
    options = options or DiffOptions()
    started = time.monotonic()
    report = DiffReport(up.label, down.label)
    pairs = pair_tables(up.tables(), down.tables(), tables)
    if not pairs:
        raise NothingToCompareError(
            f"no table to compare: neither {up.label} nor {down.label} holds a user table"
        )
    for name, up_ref, down_ref in pairs:
        table = TableReport(name)
        report.tables.append(table)
        if up_ref is None or down_ref is None:
            _one_side(table, up, up_ref, down, down_ref)
        else:
            compare_table(up, down, up.table_info(*up_ref), down.table_info(*down_ref), table, options)
        if options.table_done is not None:
            options.table_done(table)
    report.seconds = time.monotonic() - started
    return report


def _one_side(
    table: TableReport,
    up: Source,
    up_ref: tuple[str, str] | None,
    down: Source,
    down_ref: tuple[str, str] | None,
) -> None:
    """A table that only one side holds: noted, with that side's real row count."""
    if up_ref is not None:
        table.only_on = "upstream"
        table.upstream_rows = count_rows(up, up_ref)
    elif down_ref is not None:
        table.only_on = "downstream"
        table.downstream_rows = count_rows(down, down_ref)


def count_rows(source: Source, ref: tuple[str, str]) -> int:
    """The number of rows of one table, read through the source (one column of each row)."""
    first = source.table_info(*ref).columns[0].name
    return sum(1 for _ in source.rows(*ref, [first]))


def pair_tables(
    up: list[tuple[str, str]], down: list[tuple[str, str]], wanted: Sequence[str] | None
) -> list[Pair]:
    """Match tables by name; by database and name when either side spans several databases.

    ``wanted`` entries are ``db.table`` or ``table``; a ``db`` part is compared
    with either side's database, so ``shop.orders`` also selects ``orders`` of a
    single SQLite file (database ``main``). An entry that selects no table on
    either side raises :class:`NothingToCompareError` naming it (a typo must
    not make the diff compare nothing and say equal).
    """
    single = len({db for db, _ in up}) <= 1 and len({db for db, _ in down}) <= 1

    def key(ref: tuple[str, str]) -> tuple[str, str]:
        return ("", ref[1].lower()) if single else (ref[0].lower(), ref[1].lower())

    up_by, down_by = {key(r): r for r in up}, {key(r): r for r in down}
    pairs: list[Pair] = []
    for k in sorted(up_by.keys() | down_by.keys()):
        up_ref, down_ref = up_by.get(k), down_by.get(k)
        shown = up_ref or down_ref
        assert shown is not None
        pairs.append((f"{shown[0]}.{shown[1]}", up_ref, down_ref))
    if wanted is None:
        return pairs

    def refs(pair: Pair) -> list[tuple[str, str]]:
        return [r for r in pair[1:] if r is not None]

    unmatched = [e for e in wanted if not any(_selected([e], refs(p), single) for p in pairs)]
    if unmatched:
        raise NothingToCompareError(
            f"no table matches {', '.join(repr(e) for e in unmatched)} upstream or downstream"
            f" (tables: {', '.join(p[0] for p in pairs) or 'none'})"
        )
    return [p for p in pairs if _selected(wanted, refs(p), single)]


def _selected(wanted: Sequence[str], refs: list[tuple[str, str]], by_name: bool) -> bool:
    for entry in wanted:
        db, _, table = entry.lower().rpartition(".")
        if any(table == t.lower() and (not db or by_name or db == d.lower()) for d, t in refs):
            return True
    return False
