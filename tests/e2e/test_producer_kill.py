"""A producer SIGKILLed in the middle of a two-phase transaction, end to end.

Real `binlog-bridge meta`, two `pump`s resolving lost commits from the SQLite
upstream's `bridge_txn_status` (`max-txn-timeout = "2s"`) and a `drainer` with
the sqlite sink. Producers are child processes (`tests.support.dying_producer`):

1. one creates the table, commits a few transactions, then is SIGKILLed when
   its pump client is handed a Commit binlog: the upstream committed (the
   status row is there), the pump holds only the Prewrite, and its resolver
   must write the Commit with the status table's commit_ts;
2. one commits a few more, then is SIGKILLed right after a Prewrite, before
   the upstream COMMIT: no status row, and the pump must discard the Prewrite;
3. one commits a few more and exits normally.

The drainer's checkpoint must then pass the last commit_ts (a hang guard, no
timing assertion) and the downstream must equal the upstream: the first
doomed row is there, the second is not.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.apps.diff import diff
from tests.support.drainer_cluster import ROOT, DrainerProcess
from tests.support.dying_producer import TABLE
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

HANG_GUARD = 45.0
COMMITTED_ID = 100  # its Commit binlog is lost, its upstream COMMIT is not
UNCOMMITTED_ID = 200  # its Prewrite is on a pump, its upstream COMMIT never happened

PUMP_EXTRA = """\
max-txn-timeout = "2s"

[resolver]
type = "sqlite"
dsn = "sqlite://{upstream}"
interval = "200ms"
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    upstream = tmp_path / "upstream.db"
    meta, meta_addr = start_meta(tmp_path)
    pumps = [
        PumpProcess(
            tmp_path, meta_addr, node_id=f"pump-{i}", extra_config=PUMP_EXTRA.format(upstream=upstream)
        )
        for i in (1, 2)
    ]
    drainer = DrainerProcess(tmp_path, meta_addr, sink_type='"sqlite"')
    try:
        for pump in pumps:
            pump.start()
        drainer.start()
        yield {"upstream": upstream, "meta_addr": meta_addr, "pumps": pumps, "drainer": drainer}
    finally:
        members: list[DrainerProcess | PumpProcess] = [drainer, *pumps]
        for member in members:
            if member.child is not None:
                member.stop()
        meta.stop()


def run_producer(
    workdir: Path, name: str, meta_addr: str, upstream: Path, *flags: str
) -> tuple[int, list[dict[str, Any]]]:
    """Run one ``dying_producer`` child to its end; its exit status and JSON events."""
    env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [
        sys.executable,
        "-m",
        "tests.support.dying_producer",
        "--meta",
        meta_addr,
        "--upstream",
        f"sqlite://{upstream}",
        *flags,
    ]
    child = ChildProcess(argv, workdir / f"{name}.out", env)
    try:
        status = child.wait(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired as exc:
        child.kill()
        raise AssertionError(
            f"hang guard: {name} still running after {HANG_GUARD:g}s:\n{child.output}"
        ) from exc
    events = [json.loads(line) for line in child.output.splitlines() if line.startswith("{")]
    return status, events


def status_row(upstream: Path, start_ts: int) -> int | None:
    with sqlite3.connect(f"file:{upstream}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT commit_ts FROM bridge_txn_status WHERE start_ts = ?", (start_ts,)
        ).fetchone()
    return None if row is None else int(row[0])


def wait_for_checkpoint(drainer: DrainerProcess, pumps: list[PumpProcess], commit_ts: int) -> None:
    """Until the drainer's checkpoint passes ``commit_ts``: a hang guard, not a time bound."""
    checkpoint = drainer.data_dir / "checkpoint.json"
    deadline = time.monotonic() + HANG_GUARD
    members: list[DrainerProcess | PumpProcess] = [drainer, *pumps]
    while not (checkpoint.exists() and drainer.checkpoint()["commitTS"] >= commit_ts):
        alive = all(m.child is not None and m.child.proc.poll() is None for m in members)
        if not alive or time.monotonic() > deadline:
            logs = "\n".join(f"--- {m.node_id}:\n{m.output[-3000:]}" for m in members)
            reached = drainer.checkpoint()["commitTS"] if checkpoint.exists() else None
            raise AssertionError(
                f"the drainer's checkpoint did not pass {commit_ts} (at {reached}; "
                f"{'hang guard' if alive else 'a member exited'}):\n{logs}"
            )
        time.sleep(0.2)


def metric(pump: PumpProcess, name: str, **labels: str) -> float:
    """One sample of the pump's Prometheus text (0 when absent)."""
    url = f"http://127.0.0.1:{pump.status_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == name + want:
            return float(value)
    return 0.0


def rows(path: Path) -> dict[int, str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {int(i): str(n) for i, n in conn.execute(f"SELECT id, name FROM {TABLE}")}


def test_producer_sigkilled_between_prewrite_and_commit(tmp_path: Path, cluster: dict[str, Any]) -> None:
    upstream: Path = cluster["upstream"]
    meta_addr: str = cluster["meta_addr"]
    drainer: DrainerProcess = cluster["drainer"]

    # 1. Dies when handed the Commit binlog: committed upstream, Commit lost.
    status, events = run_producer(
        tmp_path, "producer-commit", meta_addr, upstream,
        "--create", "--txns", "3", "--first-id", "1", "--die", "commit", "--doomed-id", str(COMMITTED_ID),
    )  # fmt: skip
    assert status == -signal.SIGKILL, f"the producer was not SIGKILLed (exit {status}): {events}"
    dying = events[-1]
    assert dying["event"] == "dying" and dying["at"] == "commit" and dying["commit_ts"] > 0, events
    committed = dying
    assert status_row(upstream, committed["start_ts"]) == committed["commit_ts"]

    # 2. Dies right after the Prewrite: never committed upstream.
    status, events = run_producer(
        tmp_path, "producer-prewrite", meta_addr, upstream,
        "--txns", "3", "--first-id", "4", "--die", "prewrite", "--doomed-id", str(UNCOMMITTED_ID),
    )  # fmt: skip
    assert status == -signal.SIGKILL, f"the producer was not SIGKILLed (exit {status}): {events}"
    uncommitted = events[-1]
    assert uncommitted["event"] == "dying" and uncommitted["at"] == "prewrite", events
    assert status_row(upstream, uncommitted["start_ts"]) is None

    # 3. A normal producer afterwards.
    status, events = run_producer(
        tmp_path, "producer-normal", meta_addr, upstream, "--txns", "4", "--first-id", "7"
    )
    assert status == 0 and events[-1]["event"] == "done", events
    last_commit_ts = max(e["commit_ts"] for e in events if e["event"] == "committed")

    upstream_rows = rows(upstream)
    assert COMMITTED_ID in upstream_rows and UNCOMMITTED_ID not in upstream_rows, upstream_rows
    assert set(upstream_rows) == {*range(1, 11), COMMITTED_ID}, upstream_rows

    # The unpaired Prewrites hold the pumps' watermarks until the resolvers settle them.
    wait_for_checkpoint(drainer, cluster["pumps"], last_commit_ts)

    downstream = drainer.data_dir / "sqlite"
    report = diff(f"sqlite://{upstream}", f"sqlite://{downstream}")
    assert report.equal, "\n".join(report.lines())
    assert any(table.name.endswith(f".{TABLE}") or table.name == TABLE for table in report.tables), (
        report.lines()
    )

    downstream_rows = rows(downstream / "main.db")
    assert downstream_rows.get(COMMITTED_ID) == "doomed at commit", downstream_rows
    assert UNCOMMITTED_ID not in downstream_rows, downstream_rows
    assert downstream_rows == upstream_rows

    # Settled by the pumps' lost-commit path: one found in the status table, one discarded.
    outcomes = {"found": 0.0, "discarded": 0.0}
    for pump in cluster["pumps"]:
        for outcome in outcomes:
            outcomes[outcome] += metric(pump, "bridge_pump_lost_commits_total", outcome=outcome)
    assert outcomes == {"found": 1.0, "discarded": 1.0}, outcomes
