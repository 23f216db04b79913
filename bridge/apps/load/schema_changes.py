"""Schema changes while the workers write: the load's DDL thread.

Every ``--ddl-interval`` seconds it runs one change, drawn from its own
generator among those that apply:

- add a column ``x_<n>`` to ``load_wide`` (at most four extra at a time), of a
  type cycling through INT, VARCHAR(20), DECIMAL(8,3), DATE, DOUBLE;
- drop the oldest extra column of ``load_wide``;
- create ``load_scratch_<n>`` and fill it with a few rows in a transaction;
- drop the oldest scratch table (at most three exist).

Workers write ``load_wide`` meanwhile, so its rows are written under every
schema version; the writer orders each DDL's commit_ts against them.
"""

from __future__ import annotations

import logging
import random
import re
import threading

from bridge.apps.load.stats import Stats
from bridge.errors import BridgeError
from bridge.producer.writer import TxnWriter

log = logging.getLogger(__name__)

_EXTRA_TYPES = ("INT", "VARCHAR(20)", "DECIMAL(8,3)", "DATE", "DOUBLE")
_MAX_EXTRA = 4
_MAX_SCRATCH = 3


class SchemaChanger:
    """Runs the DDL thread's changes; state picks up what a previous run left."""

    def __init__(self, writer: TxnWriter, stats: Stats, seed: int) -> None:
        self._writer = writer
        self._stats = stats
        self._rng = random.Random(f"{seed}:ddl")  # noqa: S311 - reproducible test data
        wide = writer.schema("load_wide")
        self._extra = [c.name for c in wide.columns if re.fullmatch(r"x_\d+", c.name)]
        self._scratch = sorted(
            (t for t in writer.tables() if re.fullmatch(r"load_scratch_\d+", t)), key=lambda t: int(t[13:])
        )
        numbers = [int(n[2:]) for n in self._extra] + [int(t[13:]) for t in self._scratch]
        self._counter = max(numbers, default=0)

    def run(self, stop: threading.Event, interval: float) -> None:
        """Change the schema every ``interval`` seconds until ``stop`` is set."""
        while not stop.wait(interval):
            try:
                self.step()
            except BridgeError as exc:
                self._stats.failed()
                log.warning("schema change failed: %s", exc)

    def step(self) -> None:
        choices = []
        if len(self._extra) < _MAX_EXTRA:
            choices.append(self._add_column)
        if self._extra:
            choices.append(self._drop_column)
        if len(self._scratch) < _MAX_SCRATCH:
            choices.append(self._create_table)
        if self._scratch:
            choices.append(self._drop_table)
        self._rng.choice(choices)()

    def _ddl(self, sql: str) -> None:
        if self._writer.ddl(sql) is not None:
            self._stats.ddl_committed()

    def _add_column(self) -> None:
        self._counter += 1
        name = f"x_{self._counter}"
        self._ddl(
            f"ALTER TABLE load_wide ADD COLUMN {name} {_EXTRA_TYPES[self._counter % len(_EXTRA_TYPES)]} NULL"
        )
        self._extra.append(name)

    def _drop_column(self) -> None:
        self._ddl(f"ALTER TABLE load_wide DROP COLUMN {self._extra[0]}")
        self._extra.pop(0)

    def _create_table(self) -> None:
        self._counter += 1
        table = f"load_scratch_{self._counter}"
        self._ddl(
            f"CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NULL)"
        )
        self._scratch.append(table)
        rows = [{"id": i, "v": f"row {i} of {table}", "n": self._rng.randrange(1000)} for i in range(1, 21)]
        with self._writer.transaction() as txn:
            for row in rows:
                txn.insert(table, row)
        self._stats.committed(txn.rows)

    def _drop_table(self) -> None:
        self._ddl(f"DROP TABLE {self._scratch[0]}")
        self._scratch.pop(0)
