"""Typed configuration loaded from TOML, with flags overriding the file.

Each service declares its configuration as dataclasses. Field ``data_dir`` is
the TOML key ``data-dir``; a nested dataclass field is a TOML table. Loading
checks every key and every value and raises :class:`ConfigError` naming the
key (``meta.toml: tso.save-interval: expected a duration such as "3s"``).

Field metadata understood here:

- ``duration``: the value is seconds; TOML may give a number or a string
  such as ``"500ms"``, ``"3s"``, ``"10m"``, ``"1h"``, ``"7d"``.
- ``secret``: never shown by :func:`describe`.
- ``help``: one line for the configuration reference.

A dataclass may define ``validate(self) -> None`` for checks across fields;
it raises ``ConfigError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from bridge.errors import ConfigError

T = TypeVar("T")

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def toml_key(field_name: str) -> str:
    return field_name.replace("_", "-")


def format_duration(seconds: float) -> str:
    """A duration in its largest whole unit: ``50ms``, ``12.3s``, ``2.5m``, ``5h``, ``3d``."""
    if seconds < 1:
        return f"{seconds * 1000:.3g}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    if seconds < 3600:
        return f"{seconds / 60:.3g}m"
    if seconds < 86400:
        return f"{seconds / 3600:.3g}h"
    return f"{seconds / 86400:.3g}d"


def parse_duration(value: object, key: str) -> float:
    """Seconds from a number or a string like "500ms", "3s", "10m", "1h", "7d"."""
    if isinstance(value, bool):
        raise ConfigError(f'{key}: expected a duration such as "3s", got {value!r}')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION_RE.match(value)):
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    else:
        raise ConfigError(f'{key}: expected a duration such as "3s" or "500ms", got {value!r}')
    if seconds < 0:
        raise ConfigError(f"{key}: a duration cannot be negative, got {value!r}")
    return seconds


def _check_scalar(value: Any, expected: Any, key: str) -> Any:
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(expected)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_scalar(value, option, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is list:
        (item_type,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_check_scalar(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is typing.Literal:
        allowed = typing.get_args(expected)
        if value not in allowed:
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if expected is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if expected is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if expected is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if expected is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported setting type {expected!r}")  # a bug in the model


def build(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from a TOML mapping, checking keys and values."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {toml_key(f.name): f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(key, list(fields), n=1)
        hint = f" (did you mean '{prefix}{near[0]}'?)" if near else ""
        raise ConfigError(f"{prefix}{key}: unknown key{hint}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        field = fields[key]
        expected = hints[field.name]
        full = f"{prefix}{key}"
        if dataclasses.is_dataclass(expected) and isinstance(expected, type):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{full}: expected a table [{full}], got {value!r}")
            kwargs[field.name] = build(expected, value, prefix=f"{full}.")
        elif field.metadata.get("duration"):
            kwargs[field.name] = parse_duration(value, full)
        else:
            kwargs[field.name] = _check_scalar(value, expected, full)
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes as UTF-8 before parsing
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text: byte 0x{exc.object[exc.start]:02x} on line {line} "
            f"(offset {exc.start}); TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None


def merge_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Apply flag values (dotted keys, None = not given) on top of file data."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for dotted, value in overrides.items():
        if value is None:
            continue
        parts = dotted.split(".")
        table = merged
        for part in parts[:-1]:
            nxt = table.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{dotted}: {part!r} is not a table")
            table = nxt
        table[parts[-1]] = value
    return merged


def load(cls: type[T], path: Path | None, overrides: Mapping[str, Any] | None = None) -> T:
    """Load ``cls`` from an optional TOML file with flag overrides on top."""
    data = read_toml(path) if path is not None else {}
    data = merge_overrides(data, overrides or {})
    try:
        return build(cls, data)
    except ConfigError as exc:
        if path is not None:
            raise ConfigError(f"{path}: {exc}") from None
        raise


def describe(obj: object, prefix: str = "") -> list[str]:
    """``key = value`` lines for logging a config, with secrets redacted."""
    lines: list[str] = []
    if not dataclasses.is_dataclass(obj):
        return lines
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        key = f"{prefix}{toml_key(field.name)}"
        if dataclasses.is_dataclass(value):
            lines.extend(describe(value, prefix=f"{key}."))
        elif field.metadata.get("secret"):
            lines.append(f"{key} = {'<redacted>' if value else '<unset>'}")
        else:
            lines.append(f"{key} = {value!r}")
    return lines


def check_addr(value: str, key: str) -> tuple[str, int]:
    """Split ``host:port``; the error names ``key``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key}: expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


# Hosts that mean "listen on every interface"; never an address to dial.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - names hosts, binds nothing


def listen_addr(value: str, key: str) -> tuple[str, int]:
    """``host:port`` to listen on; a bare ``"9100"`` or ``":9100"`` means 127.0.0.1."""
    value = value.strip()
    if value.isdigit():
        value = f"127.0.0.1:{value}"
    elif value.startswith(":"):
        value = f"127.0.0.1{value}"
    return check_addr(value, key)


def advertise_addr(addr: str, advertise: str, bound_port: int | None = None) -> str:
    """The address others dial: ``advertise`` when set, else ``addr`` with the
    port actually bound when ``addr`` asked for port 0."""
    if advertise:
        return advertise
    host, port = check_addr(addr, "addr")
    if bound_port is not None and port == 0:
        port = bound_port
    return join_host_port(host, port)


def check_advertise_addr(addr: str, advertise: str, *, required: bool = True, when: str = "") -> str:
    """Check ``addr`` and ``advertise-addr`` together; the host ``addr`` listens on.

    A given ``advertise-addr`` must name a host others can dial and a port
    (not a wildcard, not 0). When it is empty and ``addr`` listens on every
    interface, nobody could be told where to dial, so it is required unless
    ``required`` is false; ``when`` qualifies that message (``" with etcd"``).
    """
    host, _ = check_addr(addr, "addr")
    if advertise:
        adv_host, adv_port = check_addr(advertise, "advertise-addr")
        if adv_host in WILDCARD_HOSTS or adv_port == 0:
            raise ConfigError(f"advertise-addr: must name a reachable host and port, got {advertise!r}")
    elif required and host in WILDCARD_HOSTS:
        raise ConfigError(f"advertise-addr: required{when} when addr listens on {host or 'all hosts'}")
    return host


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cluster_token_field() -> Any:
    """The ``cluster-token`` key of the meta, pump and drainer configs (read by :mod:`bridge.auth`)."""
    return dataclasses.field(
        default="",
        metadata={
            "help": "shared secret every node and client of the cluster presents; "
            "default env BINLOG_BRIDGE_CLUSTER_TOKEN; empty = none",
            "secret": True,
        },
    )
