"""The ``[skip]`` table: what the drainer skips on purpose, so that one edit gets it past a fault.

::

    [skip]
    commit-ts = [[4511, 4511], [4600, 4700]]   # inclusive ranges: every transaction (DML or DDL) in one
    tables = ["main.scratch", "~^main\\.tmp_"]  # db.table names or ~regexes: rows and DDL of these
    unknown-table-ids = true                    # rows of a table id no tracked DDL created
    on-error = "skip-and-log"                   # or "halt"; see drainer.sync.deadletter
    dead-letter-dir = "dead-letter"             # relative: in data-dir

- ``commit-ts``: a transaction whose commit_ts is in a range builds nothing,
  and a skipped DDL is not applied to the tracked schema (as
  ``[filter] ignore-txn-commit-ts``, which lists single commit_ts).
- ``tables``: rows of a matching table are dropped, and its DDL is neither
  applied to the tracked schema nor handed to the sink. Unlike ``[filter]
  ignore-table`` (whose schema is still tracked), a DDL the tracker cannot
  apply to such a table does not stop the drainer.
- ``unknown-table-ids``: rows of a table id that no DDL the drainer tracked
  created are dropped instead of halting (a writer that never sent its
  CREATE TABLE); logged once per table id.

Every skip is logged with its commit_ts and counted (``bridge_drainer_events_total{kind="ignored"}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bridge.errors import ConfigError
from drainer.sync.filter import Pattern


@dataclass
class SkipConfig:
    """``[skip]``: transactions and tables skipped on purpose, each skip logged (drainer.sync.skip)."""

    commit_ts: list[list[int]] = field(
        default_factory=list,
        metadata={"help": "inclusive [first, last] commit_ts ranges of transactions to skip"},
    )
    tables: list[str] = field(
        default_factory=list,
        metadata={"help": 'skip rows and DDL of these tables, "db.table" or ~regex (schema not tracked)'},
    )
    unknown_table_ids: bool = field(
        default=False, metadata={"help": "skip rows of table ids no tracked DDL created instead of halting"}
    )
    on_error: Literal["halt", "skip-and-log"] = field(
        default="halt",
        metadata={
            "help": "a transaction the drainer cannot build: stop, or store it in dead-letter-dir and go on"
        },
    )
    dead_letter_dir: str = field(
        default="dead-letter",
        metadata={"help": "where skip-and-log stores skipped transactions (in data-dir)"},
    )

    def validate(self) -> None:
        self.rules()

    def rules(self) -> SkipRules:
        ranges: list[tuple[int, int]] = []
        for i, pair in enumerate(self.commit_ts):
            if len(pair) != 2 or not 0 < pair[0] <= pair[1]:
                raise ConfigError(
                    f"skip.commit-ts[{i}]: expected [first, last] with 0 < first <= last, got {pair}"
                )
            ranges.append((pair[0], pair[1]))
        tables = tuple(Pattern.parse(entry, "skip.tables", qualified=True) for entry in self.tables)
        return SkipRules(tuple(ranges), tables, self.unknown_table_ids)


@dataclass(frozen=True)
class SkipRules:
    """The parsed ``[skip]`` table; see the module docstring."""

    ranges: tuple[tuple[int, int], ...] = ()
    tables: tuple[Pattern, ...] = ()
    unknown_table_ids: bool = False

    def skips_commit_ts(self, commit_ts: int) -> bool:
        return any(first <= commit_ts <= last for first, last in self.ranges)

    def skips_table(self, db: str, table: str) -> bool:
        if not self.tables:
            return False
        qualified = f"{db}.{table}"
        return any(p.matches(qualified) for p in self.tables)


NO_SKIP = SkipRules()
