"""Table comparison: checksums per key-range chunk first, then the rows of chunks that differ.

For a table with a key (primary key, else a unique key over NOT NULL
columns — the upstream's), the upstream's keys are sampled every
``chunk_size`` rows into chunk boundaries, so chunk *i* is the key range
``[boundary[i-1], boundary[i])`` in the canonical order of normalized keys
(:mod:`bridge.apps.diff.normalize`). Each side is then read once, in any order;
every row is normalized, digested, and its digest added (mod 2**128) into
its chunk's checksum with a row count. Only the chunks whose (count,
checksum) differ are read again, row by row: by a key-range query when the
key is integers (both databases order those alike), else by one more scan
that keeps only those chunks' rows. Rows are then matched by key: missing,
extra, or different (the differing columns are shown, values truncated).

A table without such a key is compared as a multiset: chunks are buckets of
the row digest, and the second pass counts each distinct row on both sides.

Memory holds the chunk checksums and, in the second pass, the rows of at
most ``max_chunks`` differing chunks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bridge.apps.diff.normalize import combine, row_digest, row_normalizer
from bridge.apps.diff.report import TableReport, show
from bridge.apps.diff.sources import KeyRange, Source, TableInfo

_MASK = (1 << 128) - 1
PROGRESS_EVERY = 200_000

Row = tuple[object, ...]
Progress = Callable[[str], None]


@dataclass
class DiffOptions:
    chunk_size: int = 10_000
    max_examples: int = 10
    max_chunks: int = 100
    progress: Progress | None = None
    table_done: Callable[[TableReport], None] | None = None  # each table's report once compared


@dataclass
class _Plan:
    """How rows of one table are read and put into chunks on both sides."""

    up: Source
    down: Source
    up_ref: tuple[str, str]
    down_ref: tuple[str, str]
    up_columns: list[str]
    down_columns: list[str]
    normalize: Callable[[Sequence[object]], Row]
    key: tuple[int, ...]  # positions of the key in the compared columns; () = multiset
    range_queries: bool  # integer key: the second pass may ask for key ranges
    boundaries: list[Row]
    chunks: int

    def chunk_of(self, row: Row, digest: int) -> int:
        if not self.key:
            return digest % self.chunks
        key = tuple([row[i] for i in self.key])
        if None in key:
            key = _sort_key(key)
        return bisect_right(self.boundaries, key)


def _sort_key(key: Row) -> Row:
    """``key`` as it is ordered: keys are NOT NULL upstream; a NULL downstream must not break the order."""
    if None not in key:
        return key
    return tuple(_NULL if v is None else v for v in key)


class _NullKey:
    """Sorts before every value and equals only itself: NULL in a key column."""

    def __lt__(self, other: object) -> bool:
        return other is not self

    def __gt__(self, other: object) -> bool:
        return False


_NULL = _NullKey()


def _tick(options: DiffOptions, name: str, what: str, count: int) -> None:
    if options.progress is not None and count % PROGRESS_EVERY == 0:
        options.progress(f"{name}: {what} {count} rows")


def plan_table(
    up: Source,
    down: Source,
    up_info: TableInfo,
    down_info: TableInfo,
    report: TableReport,
    options: DiffOptions,
) -> _Plan:
    """Match columns by name (noting the ones only one side has), pick key and chunk boundaries."""
    down_by_name = {c.name.lower(): c for c in down_info.columns}
    common = [c for c in up_info.columns if c.name.lower() in down_by_name]
    up_names = {c.name.lower() for c in up_info.columns}
    for column in up_info.columns:
        if column.name.lower() not in down_by_name:
            report.notes.append(f"column {column.name} is missing downstream")
    for column in down_info.columns:
        if column.name.lower() not in up_names:
            report.notes.append(f"column {column.name} exists only downstream")
    kinds = [combine(c.kind, down_by_name[c.name.lower()].kind) for c in common]
    position = {c.name.lower(): i for i, c in enumerate(common)}
    key = (
        tuple(position[k.lower()] for k in up_info.key)
        if all(k.lower() in position for k in up_info.key)
        else ()
    )
    plan = _Plan(
        up=up,
        down=down,
        up_ref=(up_info.db, up_info.name),
        down_ref=(down_info.db, down_info.name),
        up_columns=[c.name for c in common],
        down_columns=[down_by_name[c.name.lower()].name for c in common],
        normalize=row_normalizer(kinds),
        key=key,
        range_queries=bool(key) and all(kinds[i] == "int" for i in key),
        boundaries=[],
        chunks=1,
    )
    if key:
        plan.boundaries = _boundaries(plan, [kinds[i] for i in key], report.name, options)
        plan.chunks = len(plan.boundaries) + 1
    else:
        total = sum(1 for _ in up.rows(*plan.up_ref, plan.up_columns[:1]))
        plan.chunks = max(1, total // options.chunk_size)
    return plan


def _boundaries(plan: _Plan, key_kinds: list[str], name: str, options: DiffOptions) -> list[Row]:
    normalize = row_normalizer(key_kinds)
    names = [plan.up_columns[i] for i in plan.key]
    sample: list[Row] = []
    for count, row in enumerate(plan.up.rows(*plan.up_ref, names), start=1):
        if count % options.chunk_size == 0:
            sample.append(_sort_key(normalize(row)))
        _tick(options, name, "sampling keys:", count)
    return sorted(set(sample))


def _scan(plan: _Plan, side: str, name: str, options: DiffOptions) -> tuple[list[int], list[int], int]:
    source, ref, columns = (
        (plan.up, plan.up_ref, plan.up_columns)
        if side == "upstream"
        else (plan.down, plan.down_ref, plan.down_columns)
    )
    counts, sums = [0] * plan.chunks, [0] * plan.chunks
    normalize, chunk_of = plan.normalize, plan.chunk_of
    total = 0
    for total, raw in enumerate(source.rows(*ref, columns), start=1):
        row = normalize(raw)
        digest = row_digest(row)
        chunk = chunk_of(row, digest)
        counts[chunk] += 1
        sums[chunk] = (sums[chunk] + digest) & _MASK
        _tick(options, name, f"checksumming {side}:", total)
    return counts, sums, total


def _chunk_rows(plan: _Plan, side: str, chunks: set[int]) -> Iterator[Row]:
    """The normalized rows of ``chunks`` on one side: by key range where possible, else by a scan."""
    source, ref, columns = (
        (plan.up, plan.up_ref, plan.up_columns)
        if side == "upstream"
        else (plan.down, plan.down_ref, plan.down_columns)
    )
    if plan.range_queries and len(chunks) <= 1000:
        key_names = tuple(columns[i] for i in plan.key)
        for chunk in sorted(chunks):
            low = _bound(plan, chunk - 1)
            high = _bound(plan, chunk)
            for raw in source.rows(*ref, columns, KeyRange(key_names, low, high)):
                yield plan.normalize(raw)
        return
    for raw in source.rows(*ref, columns):
        row = plan.normalize(raw)
        if plan.chunk_of(row, row_digest(row)) in chunks:
            yield row


def _bound(plan: _Plan, index: int) -> Row | None:
    if index < 0 or index >= len(plan.boundaries):
        return None
    return plan.boundaries[index]


def compare_table(
    up: Source,
    down: Source,
    up_info: TableInfo,
    down_info: TableInfo,
    report: TableReport,
    options: DiffOptions,
) -> None:
    """Fill ``report`` with what differs between the two sides of one table."""
    plan = plan_table(up, down, up_info, down_info, report, options)
    up_counts, up_sums, report.upstream_rows = _scan(plan, "upstream", report.name, options)
    down_counts, down_sums, report.downstream_rows = _scan(plan, "downstream", report.name, options)
    report.chunks = plan.chunks
    differing = [
        i for i in range(plan.chunks) if (up_counts[i], up_sums[i]) != (down_counts[i], down_sums[i])
    ]
    report.differing_chunks = len(differing)
    examined = set(differing[: options.max_chunks])
    report.unexamined_chunks = len(differing) - len(examined)
    if not examined:
        return
    if plan.key:
        _compare_keyed(plan, examined, report, options)
    else:
        _compare_multiset(plan, examined, report, options)


def _describe_key(plan: _Plan, row: Row) -> str:
    return ", ".join(f"{plan.up_columns[i]}={show(row[i])}" for i in plan.key)


def _compare_keyed(plan: _Plan, chunks: set[int], report: TableReport, options: DiffOptions) -> None:
    up_rows = {tuple(r[i] for i in plan.key): r for r in _chunk_rows(plan, "upstream", chunks)}
    down_rows = {tuple(r[i] for i in plan.key): r for r in _chunk_rows(plan, "downstream", chunks)}
    examples = report.examples
    for key in sorted(up_rows.keys() | down_rows.keys(), key=_sort_key):
        up_row, down_row = up_rows.get(key), down_rows.get(key)
        if down_row is None:
            report.missing += 1
            line = f"missing downstream: {_describe_key(plan, up_rows[key])}"
        elif up_row is None:
            report.extra += 1
            line = f"extra downstream: {_describe_key(plan, down_row)}"
        elif up_row != down_row:
            report.different += 1
            changed = [
                f"{plan.up_columns[i]}: {show(a)} upstream, {show(b)} downstream"
                for i, (a, b) in enumerate(zip(up_row, down_row, strict=True))
                if a != b
            ]
            line = f"different: {_describe_key(plan, up_row)}: {'; '.join(changed)}"
        else:
            continue
        if len(examples) < options.max_examples:
            examples.append(line)


def _compare_multiset(plan: _Plan, chunks: set[int], report: TableReport, options: DiffOptions) -> None:
    up_rows = Counter(_chunk_rows(plan, "upstream", chunks))
    down_rows = Counter(_chunk_rows(plan, "downstream", chunks))
    missing, extra = up_rows - down_rows, down_rows - up_rows
    report.missing += sum(missing.values())
    report.extra += sum(extra.values())
    for rows, what in ((missing, "missing downstream"), (extra, "extra downstream")):
        for row, times in rows.items():
            if len(report.examples) < options.max_examples:
                shown = ", ".join(f"{n}={show(v)}" for n, v in zip(plan.up_columns, row, strict=True))
                report.examples.append(f"{what} ({times}x, no key): {shown}")
