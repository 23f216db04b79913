"""Upstream database addresses: ``sqlite:`` and ``mysql://`` DSNs.

Forms understood by :func:`parse_dsn`:

=================================================  ==========================================
``sqlite:///abs/path/file.db``                     SQLite file at ``/abs/path/file.db``
``sqlite:relative/file.db``                        SQLite file relative to the working directory
``mysql://user[:password]@host[:port]/database``   MySQL or MariaDB (``mariadb://`` is the same);
                                                   port 3306 and user ``root`` by default
=================================================  ==========================================

User, password and database are percent-decoded (``%40`` for ``@``). A
password may stay out of the DSN: :meth:`Dsn.with_password_from_env` fills it
from an environment variable (the CLI uses ``BRIDGE_UPSTREAM_PASSWORD``).
:meth:`Dsn.redacted` is the form for logs and errors: it never shows the
password, and neither do ``str()``, ``repr()`` nor any error raised here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote, urlsplit

from bridge.errors import ConfigError

__all__ = ["PASSWORD_ENV", "Dsn", "parse_dsn"]

PASSWORD_ENV = "BRIDGE_UPSTREAM_PASSWORD"  # noqa: S105 - the variable's name, not a password

_MYSQL_SCHEMES = ("mysql", "mariadb")
_MYSQL_FORM = "mysql://user[:password]@host[:port]/database"
_SQLITE_FORM = "sqlite:///absolute/path.db or sqlite:relative/path.db"


@dataclass(frozen=True)
class Dsn:
    """A parsed upstream address. ``scheme`` is ``"sqlite"`` or ``"mysql"``.

    For SQLite only ``path`` is set; for MySQL ``host``, ``port``, ``user``,
    ``password`` and ``database`` (which may be empty: no default database).
    """

    scheme: str
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = field(default="", repr=False)
    database: str = ""
    path: str = ""

    @property
    def is_sqlite(self) -> bool:
        return self.scheme == "sqlite"

    @property
    def is_mysql(self) -> bool:
        return self.scheme == "mysql"

    def with_database(self, database: str) -> Dsn:
        """The same server with another default database (MySQL)."""
        return replace(self, database=database)

    def with_password_from_env(self, variable: str = PASSWORD_ENV) -> Dsn:
        """Fill an empty password from ``variable`` when it is set; a DSN password wins."""
        if self.password or not self.is_mysql:
            return self
        return replace(self, password=os.environ.get(variable, ""))

    def redacted(self) -> str:
        """The DSN as text for logs and messages, password replaced by ``***``."""
        if self.is_sqlite:
            return f"sqlite://{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
        auth = quote(self.user, safe="") + (":***" if self.password else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mysql://{auth}@{host}:{self.port}/{quote(self.database, safe='')}"

    __str__ = redacted

    def __repr__(self) -> str:
        return f"Dsn({self.redacted()!r})"


def parse_dsn(text: str, *, key: str = "dsn") -> Dsn:
    """Parse an upstream DSN; :class:`ConfigError` naming ``key`` when it is not one.

    Error messages show the expected form, never the text given (it may
    hold a password).
    """
    text = text.strip()
    scheme, sep, _ = text.partition(":")
    scheme = scheme.lower()
    if not sep:
        raise ConfigError(f"{key}: expected {_SQLITE_FORM} or {_MYSQL_FORM}")
    if scheme == "sqlite":
        return _parse_sqlite(text, key)
    if scheme in _MYSQL_SCHEMES:
        return _parse_mysql(text, key)
    raise ConfigError(f"{key}: unknown scheme {scheme!r}; expected sqlite: or mysql://")


def _parse_sqlite(text: str, key: str) -> Dsn:
    rest = text[len("sqlite:") :]
    if rest.startswith("//"):
        url = urlsplit(text)
        if url.netloc:
            raise ConfigError(f"{key}: a SQLite DSN has no host; expected {_SQLITE_FORM}")
        path = unquote(url.path)
    else:
        path = unquote(rest)
    if not path or path.endswith("/"):
        raise ConfigError(f"{key}: no database file; expected {_SQLITE_FORM}")
    return Dsn(scheme="sqlite", path=path)


def _parse_mysql(text: str, key: str) -> Dsn:
    try:
        url = urlsplit(text)
        port = url.port or 3306
    except ValueError:
        raise ConfigError(f"{key}: expected {_MYSQL_FORM}") from None
    if not url.hostname:
        raise ConfigError(f"{key}: no host; expected {_MYSQL_FORM}")
    if url.query or url.fragment:
        raise ConfigError(f"{key}: a MySQL DSN takes no ?parameters or #fragment; expected {_MYSQL_FORM}")
    database = unquote(url.path.lstrip("/"))
    if "/" in database:
        raise ConfigError(f"{key}: the path must be a single database name; expected {_MYSQL_FORM}")
    return Dsn(
        scheme="mysql",
        host=url.hostname,
        port=port,
        user=unquote(url.username) if url.username else "root",
        password=unquote(url.password) if url.password else "",
        database=database,
    )
