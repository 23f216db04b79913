"""A heartbeat between transactions moves the capture's position to the source's binlog end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pymysqlreplication.event import HeartbeatLogEvent  # type: ignore[import-untyped]

from bridge.apps.capture.position import Position
from bridge.apps.capture.stream import Idle, Transactions


class Stream:
    """What Transactions reads of pymysqlreplication's reader: events, log_file and log_pos."""

    def __init__(self, positions: list[int]) -> None:
        self.log_file = "mysql-bin.000003"
        self.log_pos = 0
        self._positions = positions

    def __iter__(self) -> Iterator[Any]:
        for pos in self._positions:
            self.log_pos = pos  # the reader takes every event's log_pos, a heartbeat's too
            yield HeartbeatLogEvent.__new__(HeartbeatLogEvent)


def test_a_heartbeat_between_transactions_moves_the_position_to_its_coordinates() -> None:
    start = Position("mariadb", "gtid", "mysql-bin.000003", 400, "0-1-17")
    items = list(Transactions(Stream([900, 1300]), start, catalog=None, config=None))  # type: ignore[arg-type]
    assert [type(i) for i in items] == [Idle, Idle]
    ends = [(i.position.file, i.position.offset) for i in items]
    assert ends == [("mysql-bin.000003", 900), ("mysql-bin.000003", 1300)]
    assert all(i.position.gtid == "0-1-17" for i in items)  # no transaction ran: the GTID set stays
