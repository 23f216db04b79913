"""Value rules of the row codec for DATE, DATETIME, TIMESTAMP and TIME.

==============  ==============  ==================================================
column type     Datum field     Python value
==============  ==============  ==================================================
DATE            datetime_value  ``datetime.date`` (not a datetime); MySQLDate for
                                dates with a zero year, month or day
DATETIME(fsp)   datetime_value  naive ``datetime``; MySQLDateTime for zero dates
TIMESTAMP(fsp)  datetime_value  ``datetime``: naive is read as UTC, aware is
                                converted to UTC; decodes as an aware UTC datetime.
                                ``MySQLDateTime(0, 0, 0)`` is the zero TIMESTAMP
TIME(fsp)       duration_value  ``timedelta`` within -838:59:59 .. 838:59:59,
                                carried as signed microseconds
==============  ==============  ==================================================

A fraction finer than the column's ``fsp`` is refused, not rounded. A
TIMESTAMP outside MySQL's range (1970-01-01 00:00:01 .. 2038-01-19
03:14:07.999999 UTC) is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bridge.proto import row_pb2
from bridge.rowvalues import ColumnPlan, Planner, RowValueError, mismatch

T = row_pb2.ColumnType

_TIME_LIMIT_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000
_TIMESTAMP_MIN = datetime(1970, 1, 1, 0, 0, 1)
_TIMESTAMP_MAX = datetime(2038, 1, 19, 3, 14, 7, 999_999)


def _check_zero_date(year: int, month: int, day: int) -> None:
    if not (0 <= year <= 9999 and 0 <= month <= 12 and 0 <= day <= 31):
        raise ValueError(f"{year:04d}-{month:02d}-{day:02d} is not a MySQL date")
    if year and month and day:
        raise ValueError(
            f"{year:04d}-{month:02d}-{day:02d} has no zero part; only such dates need this type "
            "(use datetime.date/datetime; a date Python rejects is invalid in MySQL too)"
        )


@dataclass(frozen=True, slots=True)
class MySQLDate:
    """A MySQL date Python's ``date`` cannot hold: year, month or day is zero.

    ``MySQLDate(0, 0, 0)`` is MySQL's zero date ``0000-00-00``. Any other date
    is a ``datetime.date``, so decoding returns this type exactly when a part
    is zero. ``str()`` gives MySQL's text form.
    """

    year: int
    month: int
    day: int

    def __post_init__(self) -> None:
        _check_zero_date(self.year, self.month, self.day)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


@dataclass(frozen=True, slots=True)
class MySQLDateTime:
    """A DATETIME (or the zero TIMESTAMP) whose date has a zero part.

    ``MySQLDateTime(0, 0, 0)`` is ``0000-00-00 00:00:00``; ``str()`` gives
    MySQL's text form, with six fraction digits when ``microsecond`` is set.
    """

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0

    def __post_init__(self) -> None:
        _check_zero_date(self.year, self.month, self.day)
        if not (0 <= self.hour <= 23 and 0 <= self.minute <= 59 and 0 <= self.second <= 59):
            raise ValueError(f"{self.hour:02d}:{self.minute:02d}:{self.second:02d} is not a time of day")
        if not 0 <= self.microsecond <= 999_999:
            raise ValueError(f"microsecond {self.microsecond} is outside 0..999999")

    def __str__(self) -> str:
        text = (
            f"{self.year:04d}-{self.month:02d}-{self.day:02d} "
            f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        )
        return f"{text}.{self.microsecond:06d}" if self.microsecond else text


ZERO_DATETIME = MySQLDateTime(0, 0, 0)


def _put_date(out: row_pb2.DateTime, value: date | MySQLDate | MySQLDateTime) -> None:
    if not value.year:
        out.SetInParent()  # zero fields are not written, yet the datum must hold the date
    out.year = value.year
    out.month = value.month
    out.day = value.day


def _put_datetime(out: row_pb2.DateTime, value: datetime | MySQLDateTime) -> None:
    _put_date(out, value)
    out.hour = value.hour
    out.minute = value.minute
    out.second = value.second
    out.microsecond = value.microsecond


def _fraction_check(label: str, fsp: int) -> Callable[[int, object], None]:
    unit = 10 ** (6 - fsp)

    def check(microseconds: int, value: object) -> None:
        if microseconds % unit:
            raise RowValueError(f"{label}: {value} has a finer fraction than the column's {fsp} digits")

    return check


def _date_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, datetime) or not isinstance(value, date | MySQLDate):
            raise mismatch(label, "a datetime.date (not a datetime) or a MySQLDate", value)
        _put_date(datum.datetime_value, value)

    return ColumnPlan(encode, "datetime_value", _decode_date, label)


def _decode_date(wire: row_pb2.DateTime) -> date | MySQLDate:
    if wire.hour or wire.minute or wire.second or wire.microsecond:
        raise ValueError("a DATE value carries a time of day")
    try:
        return date(wire.year, wire.month, wire.day)
    except ValueError as exc:
        if wire.year and wire.month and wire.day:
            raise ValueError(f"{wire.year:04d}-{wire.month:02d}-{wire.day:02d}: {exc}") from None
        return MySQLDate(wire.year, wire.month, wire.day)


def _datetime_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    check_fraction = _fraction_check(label, column.fsp)

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, datetime):
            if value.utcoffset() is not None:
                raise RowValueError(f"{label}: DATETIME has no time zone; pass a naive datetime: {value!r}")
        elif not isinstance(value, MySQLDateTime):
            raise mismatch(label, "a naive datetime.datetime or a MySQLDateTime", value)
        check_fraction(value.microsecond, value)
        _put_datetime(datum.datetime_value, value)

    return ColumnPlan(encode, "datetime_value", _decode_datetime, label)


def _decode_datetime(wire: row_pb2.DateTime) -> datetime | MySQLDateTime:
    fields = (wire.year, wire.month, wire.day, wire.hour, wire.minute, wire.second, wire.microsecond)
    try:
        return datetime(*fields)
    except ValueError as exc:
        if wire.year and wire.month and wire.day:
            raise ValueError(f"{fields}: {exc}") from None
        return MySQLDateTime(*fields)


def _timestamp_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    check_fraction = _fraction_check(label, column.fsp)

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, datetime):
            if value.utcoffset() is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            if not _TIMESTAMP_MIN <= value <= _TIMESTAMP_MAX:
                raise RowValueError(
                    f"{label}: {value} UTC is outside TIMESTAMP's range "
                    f"{_TIMESTAMP_MIN} .. {_TIMESTAMP_MAX} UTC"
                )
            check_fraction(value.microsecond, value)
        elif value != ZERO_DATETIME:
            raise mismatch(label, "a datetime.datetime (naive = UTC) or MySQLDateTime(0, 0, 0)", value)
        _put_datetime(datum.datetime_value, value)

    return ColumnPlan(encode, "datetime_value", _decode_timestamp, label)


def _decode_timestamp(wire: row_pb2.DateTime) -> datetime | MySQLDateTime:
    fields = (wire.year, wire.month, wire.day, wire.hour, wire.minute, wire.second, wire.microsecond)
    try:
        return datetime(*fields, tzinfo=UTC)
    except ValueError:
        value = MySQLDateTime(*fields)
    if value != ZERO_DATETIME:
        raise ValueError(f"TIMESTAMP {value} is neither a valid time nor the zero TIMESTAMP")
    return value


def _time_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    check_fraction = _fraction_check(label, column.fsp)

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if not isinstance(value, timedelta):
            raise mismatch(label, "a datetime.timedelta", value)
        microseconds = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if not -_TIME_LIMIT_US <= microseconds <= _TIME_LIMIT_US:
            raise RowValueError(f"{label}: {value} is outside TIME's range -838:59:59 .. 838:59:59")
        check_fraction(microseconds, value)
        datum.duration_value = microseconds

    return ColumnPlan(encode, "duration_value", _decode_time, label)


def _decode_time(microseconds: int) -> timedelta:
    if not -_TIME_LIMIT_US <= microseconds <= _TIME_LIMIT_US:
        raise ValueError(f"TIME of {microseconds} microseconds is outside -838:59:59 .. 838:59:59")
    return timedelta(microseconds=microseconds)


PLANNERS: dict[int, Planner] = {
    T.DATE: _date_plan,
    T.DATETIME: _datetime_plan,
    T.TIMESTAMP: _timestamp_plan,
    T.TIME: _time_plan,
}
