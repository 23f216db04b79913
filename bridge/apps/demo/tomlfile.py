"""Writing the small TOML files the demo hands its children (the standard library only reads TOML).

Values: ``str``, ``bool``, ``int``, ``float``, lists of those, and nested
mappings, which become tables (``[sink.sqlite]``). Plain keys come before
tables, as TOML requires.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

TomlValue = str | bool | int | float | Sequence[str | bool | int | float]
TomlTable = Mapping[str, "TomlValue | TomlTable"]


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string: the same escapes, \uXXXX included.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")


def _lines(table: TomlTable, path: tuple[str, ...]) -> list[str]:
    plain = [f"{_key(k)} = {_value(v)}" for k, v in table.items() if not isinstance(v, Mapping)]
    out = plain
    for name, sub in table.items():
        if isinstance(sub, Mapping):
            header = ".".join(_key(part) for part in (*path, name))
            out = [*out, "", f"[{header}]", *_lines(sub, (*path, name))]
    return out


def dumps(table: TomlTable, comment: str = "") -> str:
    """The TOML text of ``table``, after ``comment`` lines (each prefixed with ``#``)."""
    head = [f"# {line}".rstrip() for line in comment.splitlines()]
    return "\n".join([*head, *_lines(table, ())]).lstrip("\n") + "\n"
