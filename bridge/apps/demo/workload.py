"""``binlog-bridge load`` as a child process: started against a cluster, read while it runs.

The load prints a progress line on stderr every ``--progress-interval``
(``load 12.0s | 130 txn/s | 1082 rows/s | txns 1561 rows 13120 ddl 17 rollbacks 0 errors 0``)
and one JSON summary line on stdout when it ends (docs/producers.md). Its
stderr goes to ``<name>.log``, its stdout to ``<name>.out``.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.apps.demo.cluster import cli_argv
from bridge.apps.demo.process import ServiceProcess

_PROGRESS = re.compile(
    r"load\s+(?P<elapsed>[\d.]+)s \|\s+(?P<txn_rate>\d+) txn/s \|\s+(?P<row_rate>\d+) rows/s"
    r" \| txns (?P<transactions>\d+) rows (?P<rows>\d+) ddl (?P<ddl>\d+)"
    r" rollbacks (?P<rollbacks>\d+) errors (?P<errors>\d+)"
)


@dataclass(frozen=True)
class LoadProgress:
    """The load's last progress line: rates over its last interval, totals so far."""

    elapsed: float
    txn_rate: int
    row_rate: int
    transactions: int
    rows: int
    ddl: int
    rollbacks: int
    errors: int


def last_progress(output: str) -> LoadProgress | None:
    """The last progress line in ``output`` (lines may end in \\r on a terminal), if any."""
    matches = list(_PROGRESS.finditer(output))
    if not matches:
        return None
    fields = matches[-1].groupdict()
    return LoadProgress(
        elapsed=float(fields.pop("elapsed")), **{key: int(value) for key, value in fields.items()}
    )


class LoadProcess:
    """One ``binlog-bridge load`` run against ``meta_addr`` writing to ``upstream``."""

    def __init__(
        self,
        log_dir: Path,
        meta_addr: str,
        upstream: str,
        seconds: float,
        flags: Sequence[str] = (),
        name: str = "load",
    ) -> None:
        argv = cli_argv(
            "load",
            "--meta",
            meta_addr,
            "--upstream",
            upstream,
            "--seconds",
            f"{seconds:g}",
            "--progress-interval",
            "1",
            *flags,
        )
        self.stdout_path = log_dir / f"{name}.out"
        self.process = ServiceProcess(name, argv, log_dir / f"{name}.log", stdout_path=self.stdout_path)

    def start(self) -> None:
        self.process.start()

    @property
    def running(self) -> bool:
        return self.process.running

    def progress(self) -> LoadProgress | None:
        return last_progress(self.process.output())

    def interrupt(self) -> None:
        """SIGINT: the load lets its transactions in flight finish, prints its summary and exits."""
        self.process.send(signal.SIGINT)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def result(self) -> dict[str, Any]:
        """The JSON summary the load printed; :class:`ServiceFailed` when there is none."""
        try:
            lines = self.stdout_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        for line in reversed(lines):
            if line.startswith("{"):
                try:
                    return dict(json.loads(line))
                except ValueError:
                    break
        raise self.process.failure(
            f"exited with status {self.process.returncode} without a summary line in {self.stdout_path}"
        )

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGINT (finish what is in flight), SIGKILL after ``timeout``."""
        return self.process.stop(timeout, signum=signal.SIGINT)
