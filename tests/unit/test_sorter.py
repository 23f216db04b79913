"""The sorter: pairing, rollbacks, fake binlogs, orphan Commits and the watermark."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pump.storage.segment import Pointer
from pump.storage.sorter import COMMIT, PREWRITE, ROLLBACK, Committed, Sorter, SorterState

PTR = Pointer(1, 0)


def ptr(ts: int) -> Pointer:
    return Pointer(1, ts)


@dataclass
class Fed:
    """A sorter plus everything it emitted and every watermark it showed."""

    sorter: Sorter = field(default_factory=Sorter)
    committed: list[Committed] = field(default_factory=list)
    watermarks: list[int] = field(default_factory=list)

    def add(self, tp: int, start_ts: int, commit_ts: int = 0) -> None:
        before = self.sorter.watermark
        self.sorter.add(tp, start_ts, commit_ts, ptr(start_ts))
        emitted = self.sorter.take_changes().committed
        for txn in emitted:
            assert txn.commit_ts > before, "a commit at or below an announced watermark"
        self.committed += emitted
        self.watermarks.append(self.sorter.watermark)


def test_a_commit_pairs_with_its_prewrite() -> None:
    fed = Fed()
    fed.add(PREWRITE, 10)
    assert fed.committed == [] and fed.sorter.watermark == 9
    fed.add(COMMIT, 10, 12)
    assert fed.committed == [Committed(12, 10, ptr(10))]
    assert fed.sorter.watermark == 12


def test_unpaired_prewrites_hold_the_watermark_at_the_oldest_minus_one() -> None:
    fed = Fed()
    fed.add(PREWRITE, 10)
    fed.add(PREWRITE, 20)
    fed.add(COMMIT, 20, 25)
    assert fed.sorter.watermark == 9
    fed.add(ROLLBACK, 10)
    assert fed.sorter.watermark == 25
    assert [c.start_ts for c in fed.committed] == [20]


def test_rollbacks_are_dropped() -> None:
    fed = Fed()
    fed.add(PREWRITE, 10)
    fed.add(ROLLBACK, 10)
    assert fed.committed == []
    assert fed.sorter.unpaired_count == 0
    assert fed.sorter.counters.rolled_back == 1
    changes = fed.sorter.take_changes()
    assert changes.unpaired == {}


def test_fake_binlogs_advance_an_idle_watermark_but_never_past_an_unpaired_prewrite() -> None:
    fed = Fed()
    fed.add(ROLLBACK, 100, 100)
    assert fed.sorter.watermark == 100
    fed.add(PREWRITE, 150)
    fed.add(ROLLBACK, 200, 200)
    assert fed.sorter.watermark == 149
    fed.add(COMMIT, 150, 210)
    assert fed.sorter.watermark == 210
    assert fed.sorter.counters.fake == 2


def test_the_watermark_never_goes_down_when_an_old_prewrite_arrives_late() -> None:
    fed = Fed()
    fed.add(ROLLBACK, 500, 500)
    fed.add(PREWRITE, 300)  # a long transaction that began before the fake binlog
    assert fed.sorter.watermark == 500
    fed.add(COMMIT, 300, 600)  # its commit_ts comes after its Prewrite was acknowledged
    assert fed.committed == [Committed(600, 300, ptr(300))]


def test_a_commit_at_or_below_the_watermark_is_dropped() -> None:
    fed = Fed()
    fed.add(ROLLBACK, 500, 500)
    fed.add(PREWRITE, 300)
    fed.add(COMMIT, 300, 400)  # breaks two-phase commit: 400 < announced 500
    assert fed.committed == []
    assert fed.sorter.counters.late_commits == 1
    assert fed.sorter.unpaired_count == 0


def test_an_orphan_commit_waits_for_its_prewrite_and_holds_the_watermark() -> None:
    fed = Fed()
    fed.add(ROLLBACK, 100, 100)
    fed.add(COMMIT, 150, 160)
    assert fed.sorter.orphan_count == 1
    fed.add(ROLLBACK, 170, 170)
    assert fed.sorter.watermark == 159
    fed.add(PREWRITE, 150)
    assert fed.committed == [Committed(160, 150, ptr(150))]
    assert fed.sorter.watermark == 170


def test_an_orphan_commit_expires_when_the_log_time_passes_the_timeout() -> None:
    fed = Fed(Sorter(orphan_timeout_ts=1000))
    fed.add(COMMIT, 150, 160)
    fed.add(ROLLBACK, 1159, 1159)
    assert fed.sorter.orphan_count == 1 and fed.sorter.watermark == 159
    fed.add(ROLLBACK, 1160, 1160)
    assert fed.sorter.orphan_count == 0
    assert fed.sorter.counters.orphans_expired == 1
    assert fed.sorter.watermark == 1160
    fed.add(PREWRITE, 150)  # too late now: stays unpaired for the lost-commit resolver
    assert fed.committed == []
    assert fed.sorter.unpaired_before(10**9) == [(150, ptr(150))]


def test_a_rollback_cancels_an_orphan_commit() -> None:
    fed = Fed()
    fed.add(COMMIT, 150, 160)
    fed.add(ROLLBACK, 150)
    assert fed.sorter.orphan_count == 0


def test_a_duplicate_commit_is_recognised_by_the_index() -> None:
    indexed = {12}
    fed = Fed(Sorter(is_committed=indexed.__contains__))
    fed.add(ROLLBACK, 20, 20)
    fed.add(COMMIT, 10, 12)
    fed.add(COMMIT, 15, 30)  # not in the index: an orphan
    assert fed.sorter.counters.duplicate_commits == 1
    assert fed.sorter.counters.late_commits == 0
    assert fed.sorter.orphan_count == 1


def test_a_duplicate_commit_in_the_same_round_is_ignored() -> None:
    sorter = Sorter()
    sorter.add(PREWRITE, 10, 0, PTR)
    sorter.add(COMMIT, 10, 12, PTR)
    sorter.add(COMMIT, 10, 12, PTR)
    assert len(sorter.take_changes().committed) == 1
    assert sorter.counters.duplicate_commits == 1


def test_changes_are_net_per_round() -> None:
    sorter = Sorter()
    sorter.add(PREWRITE, 10, 0, PTR)
    sorter.add(PREWRITE, 11, 0, PTR)
    sorter.add(COMMIT, 10, 12, PTR)
    changes = sorter.take_changes()
    assert changes.unpaired == {10: None, 11: PTR}
    assert changes.committed == [Committed(12, 10, PTR)]
    assert sorter.take_changes().unpaired == {}


def test_state_restores_unpaired_orphans_and_clocks() -> None:
    state = SorterState(watermark=50, max_seen=50, latest_ts=70, unpaired={60: ptr(60)}, orphans={65: 68})
    sorter = Sorter(state)
    assert sorter.min_unpaired() == 60
    sorter.add(COMMIT, 60, 66, PTR)
    sorter.add(PREWRITE, 65, 0, ptr(65))
    assert [c.commit_ts for c in sorter.take_changes().committed] == [66, 68]
    assert sorter.watermark == 68


def test_unpaired_before_lists_the_oldest_first() -> None:
    sorter = Sorter()
    for ts in (30, 10, 20):
        sorter.add(PREWRITE, ts, 0, ptr(ts))
    assert [s for s, _ in sorter.unpaired_before(25)] == [10, 20]


def test_random_interleavings_emit_each_commit_once_in_order() -> None:
    rng = random.Random(7)
    for _ in range(20):
        _check_one_random_history(rng)


def _check_one_random_history(rng: random.Random) -> None:
    """Transactions that obey two-phase commit (commit_ts taken after the Prewrite
    was stored), interleaved at random with each other and with fake binlogs."""
    clock = iter(range(1, 10**9))
    fed = Fed()
    open_txns: list[int] = []
    expected: dict[int, int] = {}
    for _ in range(400):
        action = rng.random()
        if action < 0.4 or not open_txns:
            start_ts = next(clock)
            fed.add(PREWRITE, start_ts)
            open_txns.append(start_ts)
        elif action < 0.8:
            start_ts = open_txns.pop(rng.randrange(len(open_txns)))
            commit_ts = next(clock)
            fed.add(COMMIT, start_ts, commit_ts)
            expected[start_ts] = commit_ts
        elif action < 0.9:
            fed.add(ROLLBACK, open_txns.pop(rng.randrange(len(open_txns))))
        else:
            ts = next(clock)
            fed.add(ROLLBACK, ts, ts)
    for start_ts in open_txns:
        fed.add(ROLLBACK, start_ts)
    final = next(clock)
    fed.add(ROLLBACK, final, final)
    assert sorted((c.start_ts, c.commit_ts) for c in fed.committed) == sorted(expected.items())
    assert fed.watermarks == sorted(fed.watermarks)
    assert fed.sorter.watermark == final
    assert fed.sorter.counters.late_commits == 0
