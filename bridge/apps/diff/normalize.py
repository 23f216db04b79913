"""One canonical form per value, whichever database and storage it came from.

``binlog-bridge diff`` compares MySQL/MariaDB tables with SQLite tables, and
the same value is stored differently on each side: DECIMAL as ``Decimal``
in MySQL, as TEXT (the sqlite sink) or REAL (a SQLite upstream) in SQLite;
DATETIME as ``datetime`` or as text with or without fraction digits; BIT as
bytes or an integer; unsigned 64-bit values as two's complement in SQLite.
Each column gets a **kind** (from its declared type on each side, combined by
:func:`combine`) and each value is normalized for its kind:

==========  ==================================================================
kind        canonical value
==========  ==================================================================
int         ``int``
uint64      ``int``; negative (two's complement storage) + 2**64
decimal     ``str``: plain digits, no trailing fraction zeros ("1.50" -> "1.5")
float       ``float`` rounded to single precision (MySQL's FLOAT)
double      ``float`` (-0.0 as 0.0)
bit         ``int`` (bytes read big-endian; negative + 2**64)
year        ``int``
date        ``str`` ``YYYY-MM-DD``
datetime    ``str`` ``YYYY-MM-DD HH:MM:SS.ffffff`` (six digits; ``T``, ``Z``, ``+00:00`` accepted)
timestamp   the same, in UTC (aware values converted)
time        ``int`` microseconds
text        ``str`` (bytes decoded as UTF-8)
binary      ``bytes``
json        ``str``: the document re-serialized with sorted keys, no spaces
set         ``str``: members sorted, joined by ","
any         ``(type name, value)``: no declared type (SQLite), compared as stored
==========  ==================================================================

A value that does not parse as its kind is kept as text, so it still
compares (and shows up as different) rather than failing the run.
Row digests (:func:`row_digest`) are BLAKE2b over ``repr`` of the normalized
tuple: stable across processes, unlike Python's salted ``hash``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from hashlib import blake2b

Normalizer = Callable[[object], object]

_WRAP = 1 << 64
_DATETIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?(Z|[+-]00:?00)?$"
)
_TIME = re.compile(r"^(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")

_MYSQL_KINDS = {
    "tinyint": "int",
    "smallint": "int",
    "mediumint": "int",
    "int": "int",
    "integer": "int",
    "bigint": "int",
    "decimal": "decimal",
    "numeric": "decimal",
    "float": "float",
    "double": "double",
    "real": "double",
    "bit": "bit",
    "year": "year",
    "date": "date",
    "datetime": "datetime",
    "timestamp": "timestamp",
    "time": "time",
    "json": "json",
    "set": "set",
    "binary": "binary",
    "varbinary": "binary",
    "tinyblob": "binary",
    "blob": "binary",
    "mediumblob": "binary",
    "longblob": "binary",
}
# SQLite declared types: the sqlite sink's names (drainer/sinks/sql/sqlite.py) and
# a SQLite upstream's (bridge/producer/sqlite_types.py), matched by their first word.
_SQLITE_KINDS = {
    **_MYSQL_KINDS,
    "decimal_text": "decimal",
    "json_text": "json",
    "set_text": "set",
    "enum_text": "text",
    "boolean": "int",
    "bool": "int",
}


def mysql_kind(data_type: str, column_type: str) -> str:
    """The kind of a MySQL column from ``information_schema.COLUMNS``."""
    kind = _MYSQL_KINDS.get(data_type.lower(), "text")
    if kind == "int" and data_type.lower() == "bigint" and "unsigned" in column_type.lower():
        return "uint64"
    return kind


def sqlite_kind(declared: str) -> str:
    """The kind of a SQLite column from its declared type (``any`` when it has none)."""
    words = declared.lower().replace("(", " ").split()
    if not words:
        return "any"
    kind = _SQLITE_KINDS.get(words[0], "text")
    if kind == "int" and words[0] == "bigint" and "unsigned" in words:
        return "uint64"
    return kind


def combine(upstream: str, downstream: str) -> str:
    """One kind for a column both sides have: the more specific of the two."""
    if upstream == downstream:
        return upstream
    for generic in ("any", "text"):
        if upstream == generic:
            return downstream
        if downstream == generic:
            return upstream
    if {upstream, downstream} == {"int", "uint64"}:
        return "uint64"
    return upstream


def _int(value: object) -> object:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bytes):
        return int.from_bytes(value, "big")
    try:
        return int(str(value))
    except ValueError:
        return str(value)


def _uint64(value: object) -> object:
    number = _int(value)
    return number + _WRAP if isinstance(number, int) and number < 0 else number


def _decimal(value: object) -> object:
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if not number.is_finite():
        return str(value)
    return "0" if number == 0 else format(number.normalize(), "f")


def _float(value: object) -> object:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    single: float = struct.unpack("<f", struct.pack("<f", number))[0]
    return single + 0.0


def _double(value: object) -> object:
    try:
        return float(value) + 0.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def _text_of(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


def _date(value: object) -> object:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return _text_of(value)[:10] if _DATETIME.match(_text_of(value)) else _text_of(value)


def _datetime(value: object) -> object:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
        )
    if isinstance(value, date):
        return f"{value.isoformat()} 00:00:00.000000"
    text = _text_of(value)
    if len(text) == 26 and text[10] == " " and text[19] == "." and text[4] == "-":
        return text  # already YYYY-MM-DD HH:MM:SS.ffffff
    match = _DATETIME.match(text)
    if not match:
        return text
    y, mo, d, h, mi, s, frac = match.groups()[:7]
    return f"{y}-{mo}-{d} {h or '00'}:{mi or '00'}:{s or '00'}.{(frac or '').ljust(6, '0')}"


def _time(value: object) -> object:
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, int):
        return value
    text = _text_of(value)
    match = _TIME.match(text)
    if not match:
        return text
    sign, h, m, s, frac = match.groups()
    micro = ((int(h) * 60 + int(m)) * 60 + int(s)) * 1_000_000 + int((frac or "").ljust(6, "0"))
    return -micro if sign else micro


def _binary(value: object) -> object:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def _json(value: object) -> object:
    text = _text_of(value)
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return text


def _set(value: object) -> object:
    if isinstance(value, set | frozenset | list | tuple):
        return ",".join(sorted(str(v) for v in value))
    return ",".join(sorted(m for m in _text_of(value).split(",") if m))


def _text(value: object) -> object:
    return value if isinstance(value, str) else _text_of(value)


def _any(value: object) -> object:
    return (type(value).__name__, value)


NORMALIZERS: dict[str, Normalizer] = {
    "int": _int,
    "uint64": _uint64,
    "decimal": _decimal,
    "float": _float,
    "double": _double,
    "bit": _uint64,
    "year": _int,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _datetime,
    "time": _time,
    "text": _text,
    "binary": _binary,
    "json": _json,
    "set": _set,
    "any": _any,
}


class _Never:
    """No value is of this type: the kind has no already-canonical form."""


# Values already canonical when of this exact type: passed through without a call.
_CANONICAL_TYPES: dict[str, type] = {"int": int, "year": int, "uint64": _Never, "text": str, "binary": bytes}


def row_normalizer(kinds: Sequence[str]) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """A function normalizing a whole row whose columns have ``kinds``."""
    plan = [(NORMALIZERS[k], _CANONICAL_TYPES.get(k, _Never)) for k in kinds]

    def normalize(row: Sequence[object]) -> tuple[object, ...]:
        return tuple(
            [
                v if v is None or type(v) is canonical else f(v)
                for (f, canonical), v in zip(plan, row, strict=True)
            ]
        )

    return normalize


def row_digest(row: tuple[object, ...]) -> int:
    """A 128-bit digest of a normalized row; equal rows give equal digests in any process."""
    return int.from_bytes(blake2b(repr(row).encode("utf-8", "surrogatepass"), digest_size=16).digest(), "big")
