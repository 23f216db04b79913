"""Client settings for ``binlog-bridge consume``: librdkafka and schema registry properties files.

A secured cluster needs settings the command line does not name one by one
(``security.protocol``, ``sasl.*``, ``ssl.*``; the registry's
``basic.auth.user.info`` or ``ssl.ca.location``). As with Kafka's own
console consumer (``--consumer.config``), they come from a properties file:
one ``key=value`` (or ``key: value``) a line, ``#`` and ``!`` start comments,
blank lines are skipped, whitespace around key and value is dropped.

A value written ``${NAME}`` is read from the environment variable ``NAME``
(so a password need not sit in the file); a variable that is not set is an
error naming the file, line and variable. Values are never logged.

The reader owns a few consumer settings (it assigns partitions itself and
commits offsets itself, only with ``--group``); a file that sets one is
refused with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from bridge.errors import UserError
from bridge.kafkaclient import check_security

# consumer settings the reader decides; why, for the error message
_READER_OWNS: Mapping[str, str] = {
    "bootstrap.servers": "give --bootstrap-servers",
    "enable.auto.commit": "consume commits offsets itself, with --group, after printing",
    "enable.auto.offset.store": "consume commits offsets itself, with --group, after printing",
    "group.id": "give --group",
    "enable.partition.eof": "consume needs end-of-partition events",
    "auto.offset.reset": "give --from-beginning (or not)",
    "error_cb": "not a librdkafka setting",
    "logger": "not a librdkafka setting",
}
_REGISTRY_OWNS: Mapping[str, str] = {"url": "give --schema-registry-url"}
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def read_properties(path: str, option: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``key=value`` settings of the properties file at ``path``; :class:`UserError` naming
    ``option``, the file and the line for anything malformed."""
    environ = os.environ if environ is None else environ
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{option} {path}: cannot read it: {exc}") from None
    settings: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        where = f"{option} {path}, line {number}"
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise UserError(f"{where}: expected key=value")
        key, value = line[:cut].strip(), line[cut + 1 :].strip()
        if not key or " " in key:
            raise UserError(f"{where}: {key!r} is not a setting name")
        if key in settings:
            raise UserError(f"{where}: {key} is set twice")

        def expand(match: re.Match[str], where: str = where, key: str = key) -> str:
            name = match.group(1)
            if name not in environ:
                raise UserError(f"{where}: {key} refers to ${{{name}}}, which is not set in the environment")
            return environ[name]

        settings[key] = _ENV_REFERENCE.sub(expand, value)
    return settings


def consumer_settings(path: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``--consumer-config`` file's librdkafka settings (empty without a file)."""
    settings = _checked(path, "--consumer-config", _READER_OWNS, environ)
    check_security(settings, f"--consumer-config {path}:", sep=" ")
    return settings


def registry_settings(path: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``--schema-registry-config`` file's ``SchemaRegistryClient`` settings (empty without a file)."""
    return _checked(path, "--schema-registry-config", _REGISTRY_OWNS, environ)


def _checked(
    path: str | None, option: str, owned: Mapping[str, str], environ: Mapping[str, str] | None
) -> dict[str, str]:
    if path is None:
        return {}
    settings = read_properties(path, option, environ)
    for key in settings:
        if key in owned:
            raise UserError(f"{option} {path}: {key} cannot be set here ({owned[key]})")
    return settings
