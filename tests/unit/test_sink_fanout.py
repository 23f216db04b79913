"""FanOutSink: every sink gets every event, and a transaction is decoded once for all of them."""

from collections.abc import Iterator, Sequence

from bridge.proto import row_pb2
from bridge.sink.contract import Sink
from bridge.sink.events import Event, ResolvedEvent, RowChange, TxnEvent
from bridge.sink.registry import SHARED_TXN_ROWS, FanOutSink

TABLE = row_pb2.TableSchema(db="shop", table="orders", table_id=1)


class Recording(Sink):
    """A sink that keeps the rows it was given and the events themselves."""

    def __init__(self) -> None:
        self.rows: list[RowChange] = []
        self.events: list[Event] = []

    def write(self, events: Sequence[Event]) -> None:
        self.events.extend(events)
        for event in events:
            if isinstance(event, TxnEvent):
                self.rows.extend(event.changes())

    def flush(self) -> int:
        return self.events[-1].commit_ts if self.events else 0


class Counted:
    """A transaction's decode that counts its calls."""

    def __init__(self, first_id: int, rows: int) -> None:
        self.calls = 0
        self._first, self._rows = first_id, rows

    def __call__(self) -> Iterator[RowChange]:
        self.calls += 1
        for i in range(self._first, self._first + self._rows):
            yield RowChange("insert", TABLE, None, (i, f"row {i}"))


def txn(commit_ts: int, decode: Counted, row_count: int) -> TxnEvent:
    return TxnEvent(commit_ts - 1, commit_ts, b"payload", decode, row_count)


def test_every_sink_gets_the_same_rows_from_one_decode() -> None:
    first, second = Recording(), Recording()
    decodes = [Counted(0, 3), Counted(3, 2)]
    FanOutSink([first, second]).write([txn(10, decodes[0], 3), ResolvedEvent(11), txn(12, decodes[1], 2)])
    assert [d.calls for d in decodes] == [1, 1]
    assert first.rows == second.rows == [RowChange("insert", TABLE, None, (i, f"row {i}")) for i in range(5)]
    assert [e.commit_ts for e in first.events] == [e.commit_ts for e in second.events] == [10, 11, 12]


def test_a_large_transaction_is_decoded_by_each_sink_on_its_own() -> None:
    first, second = Recording(), Recording()
    decode = Counted(0, 2)
    FanOutSink([first, second]).write([txn(10, decode, SHARED_TXN_ROWS + 1)])
    assert decode.calls == 2
    assert first.rows == second.rows and len(first.rows) == 2


def test_the_decoded_rows_are_let_go_after_the_write() -> None:
    first, second = Recording(), Recording()
    decode = Counted(0, 2)
    FanOutSink([first, second]).write([txn(10, decode, 2)])
    kept = first.events[0]
    assert isinstance(kept, TxnEvent) and decode.calls == 1
    assert list(kept.changes()) == first.rows  # decoded again: nothing was held past the write
    assert decode.calls == 2
