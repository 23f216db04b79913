"""The row codec: every column type round-trips exactly; bad values and bad bytes fail clearly."""

from __future__ import annotations

import math
import random
import string
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from bridge.errors import ProtocolError, UserError
from bridge.proto import row_pb2
from bridge.rowcodec import MySQLDate, MySQLDateTime, RowCodec, RowValueError

T = row_pb2.ColumnType
RNG_SEED = 20240601


def codec_for(type_: T, **column: Any) -> RowCodec:
    """A codec for table shop.t with one nullable column ``c`` of the given type."""
    column.setdefault("nullable", True)
    schema = row_pb2.TableSchema(
        db="shop", table="t", columns=[row_pb2.Column(id=1, name="c", type=type_, **column)]
    )
    return RowCodec(schema)


def roundtrip(codec: RowCodec, value: object) -> object:
    return codec.decode(codec.encode([value]))[0]


def wire_datum(codec: RowCodec, value: object) -> row_pb2.Datum:
    return row_pb2.Row.FromString(codec.encode([value])).values[0]


def assert_roundtrips(codec: RowCodec, values: list[Any]) -> None:
    for value in values:
        back = roundtrip(codec, value)
        assert back == value and type(back) is type(value), (value, back)


INT_RANGES = {
    T.TINYINT: 8,
    T.SMALLINT: 16,
    T.MEDIUMINT: 24,
    T.INT: 32,
    T.BIGINT: 64,
}


@pytest.mark.parametrize("type_", list(INT_RANGES), ids=T.Name)
@pytest.mark.parametrize("unsigned", [False, True])
def test_integers_round_trip_their_whole_range_and_refuse_beyond(type_: T, unsigned: bool) -> None:
    bits = INT_RANGES[type_]
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    codec = codec_for(type_, unsigned=unsigned)
    rng = random.Random(RNG_SEED)
    assert_roundtrips(
        codec, [low, high, 0, 1, low + 1, high - 1] + [rng.randint(low, high) for _ in range(200)]
    )
    assert wire_datum(codec, 1).WhichOneof("value") == ("uint_value" if unsigned else "int_value")
    for bad in (low - 1, high + 1):
        with pytest.raises(RowValueError, match=rf"shop\.t\.c .*expects an int in {low}\.\.{high}"):
            codec.encode([bad])


def test_bigint_extremes() -> None:
    assert roundtrip(codec_for(T.BIGINT, unsigned=True), 2**64 - 1) == 2**64 - 1
    assert roundtrip(codec_for(T.BIGINT), -(2**63)) == -(2**63)


@pytest.mark.parametrize("bad", ["1", 1.0, Decimal(1), b"\x01", [1]])
def test_integers_refuse_other_types(bad: object) -> None:
    with pytest.raises(RowValueError, match=r"column shop\.t\.c \(bigint\): expects an int"):
        codec_for(T.BIGINT).encode([bad])


def test_bool_is_read_as_int() -> None:
    back = roundtrip(codec_for(T.TINYINT), True)
    assert back == 1 and type(back) is int


def test_year() -> None:
    codec = codec_for(T.YEAR)
    assert_roundtrips(codec, [0, 1901, 2024, 2155])
    for bad in (1900, 2156, -1, "2024", True):
        with pytest.raises(RowValueError, match=r"0 or 1901\.\.2155"):
            codec.encode([bad])


def test_bit() -> None:
    assert_roundtrips(codec_for(T.BIT, length=1), [0, 1])
    assert_roundtrips(codec_for(T.BIT, length=64), [0, 2**64 - 1, 2**63])
    assert_roundtrips(codec_for(T.BIT), [2**64 - 1])  # undeclared length: 64 bits
    assert roundtrip(codec_for(T.BIT, length=16), b"\x01\x02") == 0x0102
    for bad in (2, -1):
        with pytest.raises(RowValueError, match=r"0\.\.1"):
            codec_for(T.BIT, length=1).encode([bad])


@pytest.mark.parametrize("type_", [T.FLOAT, T.DOUBLE], ids=T.Name)
def test_floats_round_trip_bit_exactly(type_: T) -> None:
    codec = codec_for(type_)
    rng = random.Random(RNG_SEED)
    values = [0.0, 1.5, -2.25, 1e308, -1e308, 5e-324, 2.0**-1074, 0.1 + 0.2]
    values += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    values += [math.ldexp(rng.random(), rng.randint(-1000, 1000)) for _ in range(200)]
    assert_roundtrips(codec, values)
    negative_zero = roundtrip(codec, -0.0)
    assert isinstance(negative_zero, float) and math.copysign(1.0, negative_zero) == -1.0
    assert roundtrip(codec, 3) == 3.0 and type(roundtrip(codec, 3)) is float


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_floats_refuse_nan_and_infinity(bad: float) -> None:
    with pytest.raises(RowValueError, match="MySQL has no NaN or infinity"):
        codec_for(T.DOUBLE).encode([bad])


@pytest.mark.parametrize("bad", [2**64 - 1, 10**400, Decimal("1.5"), "1.5", True])
def test_floats_refuse_inexact_or_other_types(bad: object) -> None:
    with pytest.raises(RowValueError, match="expects a finite float"):
        codec_for(T.DOUBLE).encode([bad])


def test_decimal_keeps_scale_exactly() -> None:
    codec = codec_for(T.DECIMAL, precision=10, scale=4)
    assert wire_datum(codec, Decimal("-12.3400")).decimal_value == "-12.3400"
    back = roundtrip(codec, Decimal("-12.3400"))
    assert isinstance(back, Decimal) and str(back) == "-12.3400"
    # fewer digits are padded to the column's scale, zeros beyond it dropped: both exact
    assert str(roundtrip(codec, Decimal("1.5"))) == "1.5000"
    assert str(roundtrip(codec, Decimal("1.23450000"))) == "1.2345"
    assert str(roundtrip(codec, 7)) == "7.0000"
    assert str(roundtrip(codec, Decimal("1E+3"))) == "1000.0000"
    assert str(roundtrip(codec, Decimal("-0.00"))) == "0.0000"
    assert str(roundtrip(codec, Decimal("999999.9999"))) == "999999.9999"
    assert str(roundtrip(codec, Decimal("-0.0001"))) == "-0.0001"


@pytest.mark.parametrize(
    "bad", [Decimal("1.23456"), Decimal("1000000"), Decimal("-1234567.5"), 1.5, "1.5", True]
)
def test_decimal_refuses_what_needs_rounding_or_another_type(bad: object) -> None:
    with pytest.raises(RowValueError, match=r"\(decimal\): expects a Decimal or int with at most 6 integer"):
        codec_for(T.DECIMAL, precision=10, scale=4).encode([bad])


@pytest.mark.parametrize("bad", ["NaN", "-Infinity", "sNaN", "Infinity"])
def test_decimal_refuses_nan_and_infinity(bad: str) -> None:
    with pytest.raises(RowValueError, match="finite numbers only"):
        codec_for(T.DECIMAL, precision=10, scale=4).encode([Decimal(bad)])


def test_decimal_extremes_and_random_values() -> None:
    widest = codec_for(T.DECIMAL, precision=65, scale=30)
    biggest = Decimal("9" * 35 + "." + "9" * 30)
    assert roundtrip(widest, biggest) == biggest
    assert roundtrip(widest, biggest.copy_negate()) == biggest.copy_negate()  # unary minus would round
    assert str(roundtrip(codec_for(T.DECIMAL, precision=5, scale=5), Decimal("0.12345"))) == "0.12345"
    assert str(roundtrip(codec_for(T.DECIMAL, precision=3, scale=0), Decimal("-999"))) == "-999"
    codec = codec_for(T.DECIMAL, precision=20, scale=6)
    rng = random.Random(RNG_SEED)
    for _ in range(300):
        value = Decimal(rng.randint(-(10**20) + 1, 10**20 - 1)).scaleb(-6)
        back = roundtrip(codec, value)
        assert back == value and isinstance(back, Decimal) and back.as_tuple().exponent == -6


def test_decimal_without_declared_precision_keeps_the_given_text() -> None:
    codec = codec_for(T.DECIMAL)
    for text in ("-12.3400", "0", "1.5", "123456789012345678901234567890.123"):
        assert str(roundtrip(codec, Decimal(text))) == text


@pytest.mark.parametrize("type_", [T.CHAR, T.VARCHAR, T.TEXT], ids=T.Name)
def test_strings_round_trip(type_: T) -> None:
    codec = codec_for(type_)
    rng = random.Random(RNG_SEED)
    values = [
        "",
        " ",
        "trailing  ",
        "héllo wörld",
        "日本語",
        "emoji \U0001f600",
        "nul\x00inside",
        "x" * 10_000,
    ]
    values += ["".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40))) for _ in range(100)]
    values += ["".join(chr(rng.randint(0x20, 0xD7FF)) for _ in range(20)) for _ in range(100)]
    assert_roundtrips(codec, values)


def test_strings_check_declared_length_in_characters() -> None:
    codec = codec_for(T.VARCHAR, length=3)
    assert roundtrip(codec, "日本語") == "日本語"
    with pytest.raises(RowValueError, match="4 characters; the column holds at most 3"):
        codec.encode(["abcd"])


@pytest.mark.parametrize("bad", [b"bytes", 1, None.__class__])
def test_strings_refuse_other_types(bad: object) -> None:
    with pytest.raises(RowValueError, match=r"\(varchar\): expects a str"):
        codec_for(T.VARCHAR).encode([bad])


def test_strings_refuse_lone_surrogates() -> None:
    with pytest.raises(RowValueError, match=r"shop\.t\.c .*not encodable as UTF-8"):
        codec_for(T.TEXT).encode(["bad \udc80"])


@pytest.mark.parametrize("type_", [T.BINARY, T.VARBINARY, T.BLOB], ids=T.Name)
def test_bytes_round_trip_any_byte_values(type_: T) -> None:
    codec = codec_for(type_)
    rng = random.Random(RNG_SEED)
    values = [b"", bytes(range(256)), b"\x00" * 5, b"\xff\xfe invalid utf-8 \xc3\x28"]
    values += [rng.randbytes(rng.randint(0, 300)) for _ in range(100)]
    assert_roundtrips(codec, values)
    assert roundtrip(codec, bytearray(b"ab")) == b"ab"
    assert roundtrip(codec, memoryview(b"cd")) == b"cd"


def test_bytes_check_length_and_type() -> None:
    with pytest.raises(RowValueError, match="3 bytes; the column holds at most 2"):
        codec_for(T.BINARY, length=2).encode([b"abc"])
    with pytest.raises(RowValueError, match=r"\(blob\): expects bytes, got str"):
        codec_for(T.BLOB).encode(["text"])


def test_date_round_trips_including_mysql_zero_dates() -> None:
    codec = codec_for(T.DATE)
    rng = random.Random(RNG_SEED)
    values: list[Any] = [date.min, date.max, date(2024, 2, 29), date(1000, 1, 1)]
    values += [date.fromordinal(rng.randint(1, date.max.toordinal())) for _ in range(200)]
    values += [MySQLDate(0, 0, 0), MySQLDate(2020, 0, 0), MySQLDate(2020, 5, 0), MySQLDate(0, 1, 1)]
    assert_roundtrips(codec, values)
    assert str(MySQLDate(0, 0, 0)) == "0000-00-00"


def test_mysql_date_types_hold_only_what_python_cannot() -> None:
    with pytest.raises(ValueError, match="no zero part"):
        MySQLDate(2020, 1, 1)
    with pytest.raises(ValueError, match="not a MySQL date"):
        MySQLDate(2020, 13, 0)
    with pytest.raises(ValueError, match="not a time of day"):
        MySQLDateTime(0, 0, 0, 24)
    assert str(MySQLDateTime(0, 0, 0)) == "0000-00-00 00:00:00"
    with pytest.raises(ProtocolError, match=r"\(datetime\): .*not a time of day"):
        zero_day_late = row_pb2.DateTime(year=2020, month=1, day=0, hour=24)
        codec_for(T.DATETIME).decode(bad_row([1], [row_pb2.Datum(datetime_value=zero_day_late)]))
    assert str(MySQLDateTime(2020, 0, 0, 1, 2, 3, 4)) == "2020-00-00 01:02:03.000004"


def test_date_refuses_datetime_and_strings() -> None:
    for bad in (datetime(2020, 1, 1), "2020-01-01", MySQLDateTime(0, 0, 0)):
        with pytest.raises(RowValueError, match=r"\(date\): expects a datetime.date \(not a datetime\)"):
            codec_for(T.DATE).encode([bad])


def random_datetimes(rng: random.Random, count: int) -> list[datetime]:
    start = datetime(1, 1, 1)
    span = int((datetime(9999, 12, 31, 23, 59, 59) - start).total_seconds())
    return [
        start + timedelta(seconds=rng.randint(0, span), microseconds=rng.randint(0, 999_999))
        for _ in range(count)
    ]


def test_datetime_round_trips_with_microseconds_and_zero_dates() -> None:
    codec = codec_for(T.DATETIME, fsp=6)
    values: list[Any] = [datetime.min, datetime.max, datetime(2024, 1, 2, 3, 4, 5, 123456)]
    values += random_datetimes(random.Random(RNG_SEED), 300)
    values += [MySQLDateTime(0, 0, 0), MySQLDateTime(2020, 0, 0, 12, 30, 0, 500)]
    assert_roundtrips(codec, values)


def test_datetime_fraction_must_fit_fsp() -> None:
    assert roundtrip(codec_for(T.DATETIME, fsp=3), datetime(2024, 1, 1, 0, 0, 0, 123000)) == datetime(
        2024, 1, 1, 0, 0, 0, 123000
    )
    with pytest.raises(RowValueError, match="finer fraction than the column's 3 digits"):
        codec_for(T.DATETIME, fsp=3).encode([datetime(2024, 1, 1, 0, 0, 0, 123456)])
    with pytest.raises(RowValueError, match="finer fraction than the column's 0 digits"):
        codec_for(T.DATETIME).encode([datetime(2024, 1, 1, 0, 0, 0, 1)])


def test_datetime_refuses_aware_values() -> None:
    with pytest.raises(RowValueError, match="DATETIME has no time zone"):
        codec_for(T.DATETIME).encode([datetime(2024, 1, 1, tzinfo=UTC)])


def test_timestamp_is_utc_naive_read_as_utc_aware_converted() -> None:
    codec = codec_for(T.TIMESTAMP, fsp=6)
    naive = datetime(2024, 1, 2, 3, 4, 5, 678901)
    assert roundtrip(codec, naive) == naive.replace(tzinfo=UTC)
    india = datetime(2024, 1, 2, 8, 34, 5, 678901, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    back = roundtrip(codec, india)
    assert back == india and isinstance(back, datetime) and back.tzinfo is UTC
    assert wire_datum(codec, india).datetime_value.hour == 3
    assert roundtrip(codec, MySQLDateTime(0, 0, 0)) == MySQLDateTime(0, 0, 0)
    low, high = datetime(1970, 1, 1, 0, 0, 1), datetime(2038, 1, 19, 3, 14, 7, 999999)
    assert roundtrip(codec, low) == low.replace(tzinfo=UTC) and roundtrip(codec, high) == high.replace(
        tzinfo=UTC
    )


@pytest.mark.parametrize(
    "bad",
    [datetime(1970, 1, 1), datetime(2038, 1, 19, 3, 14, 8), datetime(1969, 12, 31, 23, 0, tzinfo=UTC)],
)
def test_timestamp_refuses_values_outside_its_range(bad: datetime) -> None:
    with pytest.raises(RowValueError, match="outside TIMESTAMP's range"):
        codec_for(T.TIMESTAMP).encode([bad])


def test_timestamp_zero_is_the_only_mysql_datetime_it_takes() -> None:
    with pytest.raises(RowValueError, match=r"MySQLDateTime\(0, 0, 0\)"):
        codec_for(T.TIMESTAMP).encode([MySQLDateTime(2020, 0, 0)])


def test_time_round_trips_negative_and_extreme_durations() -> None:
    codec = codec_for(T.TIME, fsp=6)
    limit = timedelta(hours=838, minutes=59, seconds=59)
    rng = random.Random(RNG_SEED)
    values = [timedelta(0), limit, -limit, timedelta(microseconds=-1), timedelta(hours=-1, microseconds=5)]
    values += [
        timedelta(
            microseconds=rng.randint(-limit // timedelta(microseconds=1), limit // timedelta(microseconds=1))
        )
        for _ in range(300)
    ]
    assert_roundtrips(codec, values)
    assert wire_datum(codec, timedelta(seconds=-1.5)).duration_value == -1_500_000


def test_time_refuses_out_of_range_and_too_fine_values() -> None:
    limit = timedelta(hours=838, minutes=59, seconds=59)
    for bad in (limit + timedelta(microseconds=1), -limit - timedelta(seconds=1)):
        with pytest.raises(RowValueError, match="outside TIME's range"):
            codec_for(T.TIME, fsp=6).encode([bad])
    with pytest.raises(RowValueError, match="finer fraction"):
        codec_for(T.TIME, fsp=2).encode([timedelta(microseconds=-1)])
    with pytest.raises(RowValueError, match=r"expects a datetime\.timedelta"):
        codec_for(T.TIME).encode(["10:00:00"])


def test_json_text_is_kept_and_objects_get_a_canonical_form() -> None:
    codec = codec_for(T.JSON)
    for text in ('{"b": 1, "a": [1, 2]}', "null", '"just a string"', "3.5", "[]"):
        assert roundtrip(codec, text) == text
    assert (
        roundtrip(codec, {"b": 1, "a": [1, 2.5, None, True], "é": "ü"})
        == '{"a":[1,2.5,null,true],"b":1,"é":"ü"}'
    )
    assert roundtrip(codec, [1, "x"]) == '[1,"x"]'
    assert roundtrip(codec, 7) == "7" and roundtrip(codec, False) == "false"
    assert roundtrip(codec, None) is None  # SQL NULL; JSON null is the text "null"


@pytest.mark.parametrize("bad", ["{not json", "NaN", "[Infinity]", {"x": math.nan}, {1, 2}, b"{}"])
def test_json_refuses_what_is_not_json(bad: object) -> None:
    with pytest.raises(RowValueError, match=r"shop\.t\.c \(json\)"):
        codec_for(T.JSON).encode([bad])


def test_enum_takes_member_names_only() -> None:
    codec = codec_for(T.ENUM, elems=["small", "Large", ""])
    assert_roundtrips(codec, ["small", "Large", ""])
    for bad in ("large", "medium", 1):
        with pytest.raises(RowValueError, match=r"expects one of \['small', 'Large', ''\]"):
            codec.encode([bad])


def test_set_decodes_as_members_in_declaration_order() -> None:
    codec = codec_for(T.SET, elems=["read", "write", "admin"])
    assert roundtrip(codec, {"admin", "read"}) == "read,admin"
    assert roundtrip(codec, frozenset()) == ""
    assert roundtrip(codec, "admin,read,read") == "read,admin"
    assert roundtrip(codec, ["write", "write"]) == "write"
    assert roundtrip(codec, "") == ""
    with pytest.raises(RowValueError, match="'delete' is not a member"):
        codec.encode([{"read", "delete"}])
    with pytest.raises(RowValueError, match="expects a set of members"):
        codec.encode([3])


WIDE_COLUMNS: list[tuple[str, T, dict[str, Any]]] = [
    ("id", T.BIGINT, {"unsigned": True}),
    ("name", T.VARCHAR, {"length": 32, "nullable": True}),
    ("price", T.DECIMAL, {"precision": 12, "scale": 2}),
    ("ratio", T.DOUBLE, {"nullable": True}),
    ("born", T.DATE, {"nullable": True}),
    ("seen", T.TIMESTAMP, {"fsp": 6, "nullable": True}),
    ("doc", T.JSON, {"nullable": True}),
    ("kind", T.ENUM, {"elems": ["a", "b"]}),
    ("raw", T.BLOB, {"nullable": True}),
]


@pytest.fixture
def wide() -> RowCodec:
    columns = [
        row_pb2.Column(id=10 * (i + 1), name=name, type=type_, **extra)
        for i, (name, type_, extra) in enumerate(WIDE_COLUMNS)
    ]
    return RowCodec(row_pb2.TableSchema(db="shop", table="wide", columns=columns))


def test_a_row_of_mixed_types_with_nulls_round_trips(wide: RowCodec) -> None:
    row = (1, "ann", Decimal("9.99"), None, date(1990, 1, 1), None, '{"k":1}', "b", None)
    assert wide.decode(wide.encode(row)) == row
    assert wide.decode_named(wide.encode(row))["price"] == Decimal("9.99")
    named = dict(zip(wide.column_names, row, strict=True))
    assert wide.encode_named(named) == wide.encode(row)
    old, new = wide.encode_update(row, (1, "bob", *row[2:]))
    assert wide.decode(old)[1] == "ann" and wide.decode(new)[1] == "bob"


def test_row_shape_errors_name_the_table(wide: RowCodec) -> None:
    with pytest.raises(RowValueError, match=r"table shop\.wide: row has 2 values for 9 columns"):
        wide.encode([1, "x"])
    row = [1, "ann", Decimal(1), None, None, None, None, "a", None]
    row[0] = None
    with pytest.raises(RowValueError, match=r"shop\.wide\.id \(bigint unsigned\): NULL in a NOT NULL column"):
        wide.encode(row)
    with pytest.raises(RowValueError, match="no column named 'nope'"):
        wide.encode_named({"nope": 1})
    with pytest.raises(RowValueError, match="no value for column 'id'"):
        wide.encode_named({})


def test_row_value_error_is_a_user_error_and_a_value_error() -> None:
    assert issubclass(RowValueError, UserError) and issubclass(RowValueError, ValueError)


def test_decode_accepts_any_column_order(wide: RowCodec) -> None:
    row = (1, "ann", Decimal("9.99"), 0.5, None, None, "[]", "a", b"\x00")
    parsed = row_pb2.Row.FromString(wide.encode(row))
    order = list(reversed(range(len(row))))
    shuffled = row_pb2.Row(
        column_ids=[parsed.column_ids[i] for i in order], values=[parsed.values[i] for i in order]
    )
    assert wide.decode(shuffled.SerializeToString()) == row


def bad_row(ids: list[int], datums: list[row_pb2.Datum]) -> bytes:
    return row_pb2.Row(column_ids=ids, values=datums).SerializeToString()


def int_datum(value: int) -> row_pb2.Datum:
    return row_pb2.Datum(int_value=value)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff\xff\xff", r"table shop\.t: row image is not a bridge\.row\.Row"),
        (bad_row([1, 2], [int_datum(1), int_datum(2)]), r"table shop\.t: row holds unknown column id 2"),
        (bad_row([], []), r"table shop\.t: row lacks column 'c' \(id 1\)"),
        (bad_row([1, 1], [int_datum(1), int_datum(1)]), "column id 1 twice"),
        (bad_row([1], []), "row has 0 values for 1 ids"),
        (
            bad_row([1], [row_pb2.Datum(string_value="7")]),
            r"shop\.t\.c \(bigint\): expected int_value.*found string_value",
        ),
        (bad_row([1], [row_pb2.Datum()]), "found no value"),
        (bad_row([1], [row_pb2.Datum(is_null=False)]), "found is_null"),
        # a string field holding invalid UTF-8: field 2 (values) > Datum field 6 (string_value)
        (b"\x0a\x01\x01\x12\x03\x32\x01\xff", "not a bridge.row.Row"),
    ],
)
def test_decode_errors_name_table_and_column(payload: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        codec_for(T.BIGINT).decode(payload)


def test_decode_refuses_null_in_not_null_column() -> None:
    payload = bad_row([1], [row_pb2.Datum(is_null=True)])
    assert codec_for(T.BIGINT).decode(payload) == (None,)
    with pytest.raises(ProtocolError, match=r"shop\.t\.c \(bigint\): expected int_value.*found is_null"):
        codec_for(T.BIGINT, nullable=False).decode(payload)


@pytest.mark.parametrize(
    ("type_", "datum", "message"),
    [
        (
            T.DATE,
            row_pb2.Datum(datetime_value=row_pb2.DateTime(year=2020, month=13, day=1)),
            "month must be in 1..12",
        ),
        (
            T.DATE,
            row_pb2.Datum(datetime_value=row_pb2.DateTime(year=2021, month=2, day=30)),
            "day is out of range",
        ),
        (
            T.DATE,
            row_pb2.Datum(datetime_value=row_pb2.DateTime(year=2020, month=1, day=1, hour=1)),
            "time of day",
        ),
        (
            T.DATETIME,
            row_pb2.Datum(datetime_value=row_pb2.DateTime(year=2020, month=1, day=1, hour=25)),
            "hour must be in 0..23",
        ),
        (
            T.TIMESTAMP,
            row_pb2.Datum(datetime_value=row_pb2.DateTime(year=0, month=1, day=1)),
            "zero TIMESTAMP",
        ),
        (T.DECIMAL, row_pb2.Datum(decimal_value="12,5"), r"\(decimal\): invalid value"),
        (T.DECIMAL, row_pb2.Datum(decimal_value="NaN"), "not a finite number"),
        (T.TIME, row_pb2.Datum(duration_value=10**13), "outside -838:59:59"),
    ],
)
def test_decode_refuses_values_the_column_cannot_hold(type_: T, datum: row_pb2.Datum, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        codec_for(type_).decode(bad_row([1], [datum]))


def test_the_codec_validates_its_schema() -> None:
    from bridge.schema import SchemaError

    with pytest.raises(SchemaError, match="no known type"):
        codec_for(T.COLUMN_TYPE_UNSPECIFIED)


def test_decode_reads_ids_however_they_are_encoded() -> None:
    codec = codec_for(T.BIGINT)
    value = row_pb2.Row(values=[int_datum(5)]).SerializeToString()
    assert codec.decode(b"\x08\x01" + value) == (5,)  # column_ids unpacked: still id 1
    with pytest.raises(ProtocolError, match="row has 1 values for 2 ids"):
        codec.decode(codec.encode([5]) + b"\x0a\x01\x02")  # a second packed run appends id 2


@pytest.mark.parametrize(
    ("type_", "datum", "expected"),
    [
        (T.BIGINT, row_pb2.Datum(int_value=0), 0),  # a falsy value leaves decode's fast path
        (T.DOUBLE, row_pb2.Datum(double_value=-0.0), -0.0),
        (T.VARCHAR, row_pb2.Datum(string_value=""), ""),
        (T.BIGINT, row_pb2.Datum(is_null=True), None),
    ],
)
def test_falsy_values_and_null_decode_exactly(type_: T, datum: row_pb2.Datum, expected: object) -> None:
    (got,) = codec_for(type_).decode(bad_row([1], [datum]))
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("datum", "found"),
    [(row_pb2.Datum(), "no value"), (row_pb2.Datum(int_value=20200101), "int_value")],
)
def test_a_message_typed_column_checks_which_field_is_set(datum: row_pb2.Datum, found: str) -> None:
    with pytest.raises(ProtocolError, match=f"expected datetime_value.*found {found}"):
        codec_for(T.DATE).decode(bad_row([1], [datum]))
