"""What a demo run did and found: printed at the end and saved as ``summary.json``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from bridge.apps.demo.progress import seconds


@dataclass
class DemoSummary:
    """The figures of one run. ``equal`` decides the exit status."""

    data_dir: str
    upstream: str
    downstream: str
    load: dict[str, Any] = field(default_factory=dict)  # the load's own JSON summary
    max_lag: float | None = None
    avg_lag: float | None = None
    catch_up_seconds: float = 0.0
    target_ts: int = 0
    checkpoint_ts: int = 0
    tables: int = 0
    diff_rows: int = 0
    diff_lines: list[str] = field(default_factory=list)  # one or more per table
    diff_seconds: float = 0.0
    equal: bool = False
    kept: bool = True
    files: list[str] = field(default_factory=list)  # what is where in the data dir

    @property
    def verdict(self) -> str:
        if self.equal:
            return "EQUAL: the downstream equals the upstream"
        return "DIFFERENT: the downstream does not equal the upstream"

    def lines(self) -> list[str]:
        load = self.load
        where = self.data_dir if self.kept else f"{self.data_dir} (removed; --keep keeps it)"
        return [
            "binlog-bridge demo: summary",
            f"  workload     {load.get('elapsed', 0):.1f}s: {load.get('transactions', 0)} transactions "
            f"({load.get('txn_per_s', 0):.0f}/s), {load.get('rows', 0)} row changes "
            f"({load.get('rows_per_s', 0):.0f}/s), {load.get('ddl', 0)} DDL, "
            f"{load.get('rollbacks', 0)} rollbacks, {load.get('errors', 0)} given up",
            f"  replication  lag max {seconds(self.max_lag)}, avg {seconds(self.avg_lag)}; "
            f"caught up {self.catch_up_seconds:.1f}s after the producers stopped "
            f"(checkpoint {self.checkpoint_ts} >= {self.target_ts})",
            f"  diff         {self.upstream} -> {self.downstream}: "
            f"{self.tables} tables, {self.diff_rows} upstream rows, {self.diff_seconds:.1f}s",
            *(f"                 {line}" for line in self.diff_lines),
            f"  data         {where}",
            f"               {'; '.join(self.files)}",
            f"  result       {self.verdict}",
        ]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "verdict": self.verdict}, indent=1, sort_keys=True)
