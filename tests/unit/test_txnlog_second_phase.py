"""The writer's second phase: a Commit the pump refuses is reported as possibly not replicated."""

from __future__ import annotations

import logging

import pytest

from bridge.errors import CommitRefused, NoPumpAvailable, PumpError
from bridge.producer.txnlog import send_second_phase
from bridge.proto import binlog_pb2


class RefusingPumps:
    def __init__(self, error: PumpError) -> None:
        self.error = error
        self.sent: list[binlog_pb2.Binlog] = []

    def get_timestamps(self, count: int = 1) -> int:
        return 1

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        self.sent.append(binlog)
        raise self.error


def commit(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=start_ts + 1)


def test_a_refused_commit_is_logged_as_possibly_not_replicated(caplog: pytest.LogCaptureFixture) -> None:
    pumps = RefusingPumps(CommitRefused("start_ts 41 was discarded by resolver none"))
    with caplog.at_level(logging.ERROR, logger="bridge.producer.txnlog"):
        send_second_phase(pumps, commit(41))  # the upstream outcome stands: nothing is raised
    assert len(pumps.sent) == 1
    [record] = caplog.records
    assert "start_ts 41" in record.getMessage() and "NOT replicated" in record.getMessage()


def test_an_undelivered_commit_is_left_to_the_resolver(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="bridge.producer.txnlog"):
        send_second_phase(RefusingPumps(NoPumpAvailable("no pump")), commit(7))
    [record] = caplog.records
    assert "resolver will settle" in record.getMessage() and "NOT replicated" not in record.getMessage()
