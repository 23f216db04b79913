"""Commits the sorter would drop, and the gate that refuses them before they are
written (pump/storage/late_commits.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.binlog import COMMIT_REFUSED_PREFIX
from pump.storage.late_commits import LateCommit, LateCommitGate
from pump.storage.segment import Pointer
from pump.storage.sorter import COMMIT, PREWRITE, ROLLBACK, Sorter
from pump.storage.writer import Record


def feed(sorter: Sorter, tp: int, start_ts: int, commit_ts: int = 0) -> None:
    sorter.add(tp, start_ts, commit_ts, Pointer(1, start_ts))


def commit_record(start_ts: int, commit_ts: int) -> Record:
    return (b"", COMMIT, start_ts, commit_ts)


def refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("bridge_pump_late_commits_refused_total", {"reason": reason})
    return value or 0.0


def test_would_drop_commit_follows_the_watermark() -> None:
    indexed = {15}
    sorter = Sorter(is_committed=indexed.__contains__)
    feed(sorter, PREWRITE, 10)
    assert sorter.watermark == 9
    assert not sorter.would_drop_commit(12)  # its Prewrite is pending: it pairs
    feed(sorter, ROLLBACK, 10)  # discarded
    feed(sorter, ROLLBACK, 20, 20)  # a fake binlog: time moves on
    assert sorter.watermark == 20
    assert sorter.would_drop_commit(12)  # at or below the watermark: dropped if written
    assert not sorter.would_drop_commit(15)  # a duplicate of an indexed commit
    assert not sorter.would_drop_commit(21)  # above the watermark: kept as an orphan


def test_a_commit_paired_this_round_is_a_duplicate_not_late() -> None:
    sorter = Sorter()
    feed(sorter, PREWRITE, 10)
    feed(sorter, COMMIT, 10, 12)
    assert sorter.watermark == 12
    assert sorter.holds_commit(12) and not sorter.would_drop_commit(12)
    sorter.take_changes()
    assert sorter.would_drop_commit(12)  # without an index saying so, 12 is only late now


def test_gate_refuses_a_commit_whose_prewrite_was_discarded() -> None:
    sorter = Sorter()
    gate = LateCommitGate(sorter, threading.Lock())
    feed(sorter, PREWRITE, 100)
    records = [(b"", PREWRITE, 300, 0), commit_record(100, 150)]
    assert not gate.suspects(records)  # pending Prewrite, commit_ts above the watermark
    gate.settle(100, None, 'resolver "none" (upstream not asked)')
    feed(sorter, ROLLBACK, 100)
    assert gate.suspects(records)
    reason = gate.refusal(records)
    assert reason.startswith(COMMIT_REFUSED_PREFIX)
    assert "start_ts 100" in reason and "commit_ts 150" in reason
    assert 'discarded by resolver "none"' in reason and "max-txn-timeout" in reason
    assert gate.settlement(100) is not None and gate.settlement(100).when in reason  # type: ignore[union-attr]
    before = refused_count("settled")
    for _ in range(2):  # a retry of the same Commit is refused again, counted once
        with pytest.raises(LateCommit, match="start_ts 100"):
            gate.refuse(records)
    assert refused_count("settled") == before + 1


def test_gate_takes_the_commit_the_resolver_found_and_refuses_another() -> None:
    sorter = Sorter()
    gate = LateCommitGate(sorter, threading.Lock())
    feed(sorter, PREWRITE, 100)
    gate.settle(100, 140, 'resolver "sqlite" (up.db)')
    assert gate.refusal([commit_record(100, 140)]) == ""  # the same Commit: a duplicate
    feed(sorter, COMMIT, 100, 140)
    assert gate.refusal([commit_record(100, 140)]) == ""
    reason = gate.refusal([commit_record(100, 145)])
    assert 'resolver "sqlite" (up.db) found it committed at commit_ts 140' in reason


def test_gate_refuses_a_commit_below_the_watermark_it_does_not_hold() -> None:
    sorter = Sorter()
    gate = LateCommitGate(sorter, threading.Lock())
    feed(sorter, ROLLBACK, 500, 500)  # fake: watermark 500
    records = [commit_record(90, 120)]  # no Prewrite known, commit_ts long passed
    assert gate.suspects(records)
    before = refused_count("late")
    with pytest.raises(LateCommit, match=r"watermark 500 .* has passed its commit_ts"):
        gate.refuse(records)
    assert refused_count("late") == before + 1
    assert gate.refusal([commit_record(400, 501)]) == ""  # above the watermark: an orphan for now


def test_gate_forgets_the_oldest_settlements_past_its_limit() -> None:
    gate = LateCommitGate(Sorter(), threading.Lock(), limit=2)
    for start_ts in (1, 2, 3):
        gate.settle(start_ts, None, "test")
    assert gate.settlement(1) is None
    assert gate.settlement(2) is not None and gate.settlement(3) is not None


def test_settlements_survive_a_restart_through_settled_log(tmp_path: Path) -> None:
    path = tmp_path / "settled.log"

    async def settle_and_persist() -> None:
        gate = LateCommitGate(Sorter(), threading.Lock(), path)
        gate.settle(100, None, 'resolver "none" (upstream not asked)')
        await gate.persist(100)
        gate.settle(200, 250, 'resolver "sqlite" (/up db.db)')
        await gate.persist(200)

    asyncio.run(settle_and_persist())
    with path.open("a") as file:
        file.write("300 0 17")  # a torn last line: a crash mid-append
    gate = LateCommitGate(Sorter(), threading.Lock(), path)
    assert 'discarded by resolver "none"' in gate.refusal([commit_record(100, 10**18)])
    assert "found it committed at commit_ts 250" in gate.refusal([commit_record(200, 260)])
    assert "(/up db.db)" in gate.refusal([commit_record(200, 260)])
    assert gate.refusal([commit_record(200, 250)]) == ""
    assert gate.settlement(300) is None


def test_settled_log_keeps_the_newest_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "settled.log"
    path.write_text("".join(f"{ts} 0 1700000000000 test\n" for ts in range(1, 8)))
    gate = LateCommitGate(Sorter(), threading.Lock(), path, limit=3)
    assert [ts for ts in range(1, 8) if gate.settlement(ts)] == [5, 6, 7]
    assert path.read_text().splitlines() == [f"{ts} 0 1700000000000 test" for ts in (5, 6, 7)]
