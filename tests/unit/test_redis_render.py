"""Canonical value text of the redis sink: one rule per row value type."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from bridge.rowtemporal import MySQLDate, MySQLDateTime
from drainer.sinks.redis.render import dumps, json_image, json_value, key_text, value_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (42, "42"),
        (-7, "-7"),
        (2**64 - 1, "18446744073709551615"),
        (True, "1"),
        (Decimal("12.50"), "12.50"),
        (Decimal("1E+3"), "1000"),
        (Decimal("-0.001"), "-0.001"),
        (Decimal("1.2E-7"), "0.00000012"),
        (1.5, "1.5"),
        (1e16, "10000000000000000.0"),
        (1.25e-7, "0.000000125"),
        (-0.0, "-0.0"),
        ("Ünïcode:x", "Ünïcode:x"),
        (b"\x00\xff\x10", "00ff10"),
        (bytearray(b"\x01"), "01"),
        (date(2024, 5, 1), "2024-05-01"),
        (datetime(2024, 5, 1, 10, 20, 30), "2024-05-01T10:20:30"),
        (datetime(2024, 5, 1, 10, 20, 30, 123000), "2024-05-01T10:20:30.123000"),
        (datetime(2024, 5, 1, 10, 20, 30, tzinfo=UTC), "2024-05-01T10:20:30+00:00"),
        (timedelta(hours=838, minutes=59, seconds=59), "838:59:59"),
        (timedelta(seconds=-1, microseconds=500), "-00:00:00.999500"),
        (MySQLDate(0, 0, 0), "0000-00-00"),
        (MySQLDateTime(2024, 0, 1, 1, 2, 3), "2024-00-01T01:02:03"),
    ],
)
def test_value_text_is_canonical(value: object, text: str) -> None:
    assert value_text(value) == text
    assert key_text(value) == text


def test_null_renders_as_the_configured_token() -> None:
    assert key_text(None) == "null"
    assert key_text(None, "\\N") == "\\N"


def test_a_value_without_a_rule_is_refused() -> None:
    with pytest.raises(TypeError, match="no canonical text"):
        value_text(object())


def test_json_keeps_numbers_and_null_and_texts_the_rest() -> None:
    assert json_value(None) is None
    assert json_value(7) == 7
    assert json_value(2.5) == 2.5
    assert json_value(True) == 1
    assert json_value(Decimal("1.10")) == "1.10"
    assert json_value(b"\xab") == "ab"
    image = json_image(("id", "at", "note"), (1, date(2020, 1, 2), None))
    assert image == {"id": 1, "at": "2020-01-02", "note": None}
    assert json_image(("id",), None) is None
    text = dumps({"k": "é", "n": [1, 2]})
    assert text == '{"k":"é","n":[1,2]}' and json.loads(text) == {"k": "é", "n": [1, 2]}
