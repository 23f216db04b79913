"""What a diff found, per table and overall, and how it is printed."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_VALUE_CHARS = 40


def show(value: object) -> str:
    """A value for a message, truncated: rows may hold long texts."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


@dataclass
class TableReport:
    name: str
    upstream_rows: int = 0
    downstream_rows: int = 0
    missing: int = 0  # rows upstream has and downstream lacks
    extra: int = 0  # rows downstream has and upstream lacks
    different: int = 0  # same key, other values
    chunks: int = 0
    differing_chunks: int = 0
    unexamined_chunks: int = 0  # differing chunks beyond the row-by-row limit
    only_on: str = ""  # "upstream" or "downstream": the table exists on that side only
    notes: list[str] = field(default_factory=list)  # structural differences (columns)
    examples: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (
            self.only_on
            or self.notes
            or self.differing_chunks
            or self.missing
            or self.extra
            or self.different
        )

    def lines(self) -> list[str]:
        if self.equal:
            return [f"{self.name}: equal ({self.upstream_rows} rows, {self.chunks} chunks)"]
        if self.only_on:
            rows = self.upstream_rows if self.only_on == "upstream" else self.downstream_rows
            return [f"{self.name}: DIFFERENT: the table exists only {self.only_on} ({rows} rows)"]
        head = (
            f"{self.name}: DIFFERENT: upstream {self.upstream_rows} rows, downstream {self.downstream_rows}; "
            f"{self.missing} missing, {self.extra} extra, {self.different} different "
            f"({self.differing_chunks} of {self.chunks} chunks differ"
        )
        if self.unexamined_chunks:
            head += f", {self.unexamined_chunks} not examined row by row"
        return [head + ")"] + [f"  {n}" for n in self.notes] + [f"  {e}" for e in self.examples]


@dataclass
class DiffReport:
    upstream: str
    downstream: str
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.upstream_rows for t in self.tables)

    def summary(self) -> str:
        different = sum(not t.equal for t in self.tables)
        verdict = "equal" if self.equal else f"{different} of {len(self.tables)} tables differ"
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (
            f"diff {self.upstream} -> {self.downstream}: {verdict} "
            f"({len(self.tables)} tables, {self.rows} upstream rows, {self.seconds:.1f}s, {rate:.0f} rows/s)"
        )

    def lines(self) -> list[str]:
        out = [line for t in self.tables for line in t.lines()]
        return [*out, self.summary()]
