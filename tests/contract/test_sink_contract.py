"""The sink contract (bridge/sink/contract.py), case by case, against every registered sink.

Each case runs on every target of :mod:`tests.contract.targets` — MariaDB, the Tansu broker,
Redis, a SQLite directory, a binlog-file directory and a fan-out of the last two — with the
same workload (:mod:`tests.contract.workload`: rows, large rows, DDL between row changes),
driven as the drainer drives a sink (:class:`bridge.sink.driver.SinkDriver`), and ends by
comparing the downstream with the workload's model. Faults are real and retriable: the
target's connection unplugged, its file locked, its next file names taken.
"""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.errors import BridgeError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.driver import SinkDriver
from bridge.sink.errors import SinkUnavailable
from bridge.sink.registry import FanOutSink
from tests.contract.targets import (
    NAMES,
    FanOutTarget,
    FileTarget,
    Target,
    descriptors_into,
    make_target,
    partner_of,
)
from tests.contract.workload import phases

MARKS = {"mysql": pytest.mark.mysql, "kafka": pytest.mark.kafka, "redis": pytest.mark.redis}


class HealingDriver(SinkDriver):
    """The drainer's driver, retrying at once; the first retry after each fault heals it."""

    def __init__(self, sink: Sink, faulty: list[Target]) -> None:
        super().__init__(sink, threading.Event(), retry_initial=0.01, retry_max=0.05)
        self.faulty = faulty

    def _note_retry(self, what: str, exc: BridgeError, delay: float) -> None:
        super()._note_retry(what, exc, delay)
        for target in self.faulty:
            target.heal()


@pytest.fixture(params=[pytest.param(name, marks=MARKS.get(name, ()), id=name) for name in NAMES])
def target_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _target(name: str, tmp_path: Path, db: str, bootstrap: str, faults: bool) -> Iterator[Target]:
    target = make_target(name, tmp_path / name, db, bootstrap, faults)
    try:
        yield target
    finally:
        target.cleanup()


@pytest.fixture
def target(target_name: str, tmp_path: Path, unique_name: str, kafka_bootstrap: str) -> Iterator[Target]:
    """A target on the shared services."""
    yield from _target(target_name, tmp_path, unique_name, kafka_bootstrap, faults=False)


@pytest.fixture
def faulty(target_name: str, tmp_path: Path, unique_name: str, kafka_bootstrap: str) -> Iterator[Target]:
    """A target that can be made to fail (kafka: a broker of its own behind a forwarder)."""
    yield from _target(target_name, tmp_path, unique_name, kafka_bootstrap, faults=True)


def test_events_are_written_again_after_a_failed_flush_and_land_once(faulty: Target) -> None:
    workload, (a, b, c) = phases(faulty.db)
    driver = HealingDriver(faulty.sink(), [faulty])
    driver.open(SinkContext())
    try:
        driver.write(a)
        assert driver.flush() == a[-1].commit_ts
        faulty.break_()
        driver.write(b)  # a sink may fail here or only at the flush; the driver heals at its first retry
        assert driver.flush() == b[-1].commit_ts
        assert driver.retries >= 1, "the fault did not reach the sink"
        driver.write(c)
        assert driver.flush() == c[-1].commit_ts
    finally:
        driver.close()
    faulty.check(workload, c[-1].commit_ts)


def test_events_delivered_again_after_a_restart_and_twice_in_a_row_land_once(target: Target) -> None:
    workload, (a, b, c) = phases(target.db)
    first = SinkDriver(target.sink(), threading.Event())
    first.open(SinkContext())
    try:
        first.write(a)
        flushed = first.flush()
        first.write(b)
        first.flush()
        first.write(c)  # never flushed: the checkpoint stays at the end of a
    finally:
        first.close()
    second = SinkDriver(target.sink(), threading.Event())
    second.open(SinkContext(resume_ts=flushed, safe_mode=True))
    try:
        for batch in (b, b, c, c):
            second.write(batch)
        assert second.flush() == c[-1].commit_ts
    finally:
        second.close()
    target.check(workload, c[-1].commit_ts)


def test_a_second_open_after_a_failed_one_and_after_close_leaks_nothing(faulty: Target) -> None:
    gc.collect()  # what earlier tests dropped is not this sink's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)  # a file object dropped while still open
        position = open_twice(faulty)
        gc.collect()
    mine = [str(path) for path in faulty.local_paths()] + ["socket"]
    unclosed = [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning) and any(m in str(w.message) for m in mine)
    ]
    assert unclosed == [], "a file or socket dropped without being closed"
    assert descriptors_into(faulty.local_paths()) == [], "a file left open by a sink that was closed"
    faulty.check(phases(faulty.db)[0], position)


def open_twice(faulty: Target) -> int:
    """Open (failing first), write, close, open again (failing first), write, close."""
    _, (a, b, c) = phases(faulty.db)
    driver = HealingDriver(faulty.sink(), [faulty])
    if faulty.fails_open:
        faulty.break_()
    driver.open(SinkContext())  # retried after a retriable failure
    assert driver.retries >= (1 if faulty.fails_open else 0)
    try:
        driver.write(a)
        flushed = driver.flush()
    finally:
        driver.close()
    # opened again at the flushed position, as the drainer does to find a refused change, and
    # failing again: a sink that holds files now must not open them twice
    if faulty.fails_open:
        faulty.break_()
    driver.open(SinkContext(resume_ts=flushed, safe_mode=True))  # (kafka: topics known, no call)
    try:
        driver.write(b)
        driver.write(c)
        assert driver.flush() == c[-1].commit_ts
    finally:
        driver.close()
    return c[-1].commit_ts


def test_ddl_between_row_changes_in_one_batch_applies_in_order(target: Target) -> None:
    workload, (a, b, c) = phases(target.db)
    driver = SinkDriver(target.sink(), threading.Event())
    driver.open(SinkContext())
    try:
        driver.write([*a, *b, *c])  # CREATE, ALTER and CREATE among the row changes of one write
        assert driver.flush() == c[-1].commit_ts
    finally:
        driver.close()
    target.check(workload, c[-1].commit_ts)


def test_a_retriable_failure_in_one_member_of_a_fan_out(faulty: Target, tmp_path: Path) -> None:
    """Each member fails once; the other one gets the same events written again."""
    partner: Target | None = None
    if isinstance(faulty, FanOutTarget):
        members = list(faulty.members)
    else:
        partner = partner_of(faulty, tmp_path)
        members = [faulty, partner]
    # the file member fails in b (its large rows make it start a new file), the other one in c
    members.sort(key=lambda member: not isinstance(member, FileTarget))
    workload, (a, b, c) = phases(faulty.db)
    driver = HealingDriver(FanOutSink([member.sink() for member in members]), members)
    driver.open(SinkContext())
    try:
        driver.write(a)
        assert driver.flush() == a[-1].commit_ts
        for failing, batch in zip(members, (b, c), strict=True):
            retries = driver.retries
            failing.break_()
            driver.write(batch)
            assert driver.flush() == batch[-1].commit_ts
            assert driver.retries > retries, f"the fault of {failing.name} did not reach the fan-out"
    finally:
        driver.close()
        if partner is not None:
            partner.cleanup()
    for member in members:
        member.check(workload, c[-1].commit_ts)


def test_flush_never_reports_a_position_the_target_did_not_acknowledge(faulty: Target) -> None:
    workload, (a, b, c) = phases(faulty.db)
    sink = faulty.sink()
    sink.open(SinkContext())
    try:
        sink.write(a)
        flushed = sink.flush()
        assert flushed == a[-1].commit_ts
        faulty.check(workload, flushed)
        faulty.break_()
        failures, reported = 0, []
        try:
            sink.write(b)
        except SinkUnavailable:
            failures += 1
        for _ in range(2):  # while it fails, and once healed but before anything is written again
            try:
                reported.append(sink.flush())
            except SinkUnavailable:
                failures += 1
            faulty.heal()
        assert failures >= 1, "the fault did not reach the sink"
        for position in reported:
            assert flushed <= position <= b[-1].commit_ts
            faulty.check(workload, position)  # everything up to the reported position is downstream
        # what the driver does after a failure: write the unflushed events again, until a flush works
        driver = SinkDriver(sink, threading.Event(), retry_initial=0.01, retry_max=0.05)
        driver.write([*b, *c])
        assert driver.flush() == c[-1].commit_ts
    finally:
        sink.close()
    faulty.check(workload, c[-1].commit_ts)
