"""Database addresses: ``sqlite:`` and ``mysql://`` DSNs, and connecting to a MySQL one.

Forms understood by :func:`parse_dsn`:

=================================================  ==========================================
``sqlite:///abs/path/file.db``                     SQLite file at ``/abs/path/file.db``
``sqlite:relative/file.db``                        SQLite file relative to the working directory
``sqlite:up.db?database=shop``                     ... whose tables the bridge names ``shop.<table>``
                                                   (default ``main``, SQLite's own name)
``mysql://user[:password]@host[:port]/database``   MySQL or MariaDB (``mariadb://`` is the same);
                                                   port 3306 and user ``root`` by default
=================================================  ==========================================

A SQLite DSN takes one parameter, ``database``: the database name the
upstream reports (and the diff reads the file under), so two SQLite upstreams
of one cluster stay apart downstream; 1 to 64 characters, no control
characters. Other parameters are refused by name.

A MySQL DSN may end in ``?charset=...&connect_timeout=...&read_timeout=...&write_timeout=...``,
``&unix_socket=...`` and the TLS parameters below (:data:`MYSQL_PARAMS`); other parameters are
refused by name.

Every pymysql connection of the project is opened by :func:`bridge.mysql.connect`
(arguments: :meth:`Dsn.pymysql_args`), so each honours the DSN's host, port,
user, password, ``charset``, timeouts, ``unix_socket`` and TLS the same way;
SQLite files are opened by :func:`connect_sqlite` (or :meth:`Dsn.connect_sqlite`),
read-only ones included.

TLS, named as the MySQL clients name it (:meth:`Dsn.pymysql_tls` turns it
into pymysql arguments):

=======================================  ==========================================
``ssl-mode=preferred``                   TLS when the server offers it, else plaintext;
                                         the default when the DSN names no TLS file
``ssl-mode=disabled``                    plaintext; no TLS set-up cost per connection
``ssl-mode=required``                    TLS or no connection; the certificate is not checked
``ssl-mode=verify-ca``                   ... and the server certificate must chain to ``ssl-ca``
``ssl-mode=verify-identity``             ... and name the host connected to; the
                                         default when the DSN names ``ssl-ca`` or ``ssl-cert``
``ssl-ca``, ``ssl-cert``, ``ssl-key``    PEM files: the CA, the client certificate, its key
=======================================  ==========================================

So a DSN that turns TLS on by naming its files verifies the server fully unless
it asks for less (MySQL's own client would assume ``verify-ca``; a bridge
connection that names a CA is meant to stop a man in the middle, which needs
the host name checked too).

Refused when parsing: an unknown mode; a TLS file with ``disabled``;
``ssl-ca`` with a mode that does not verify (it would be ignored);
``verify-*`` without ``ssl-ca``; ``ssl-cert`` with ``preferred`` (pymysql
cannot offer a client certificate and still fall back to plaintext);
``ssl-key`` without ``ssl-cert``; a file that does not exist.

User, password and database are percent-decoded (``%40`` for ``@``). A
password may stay out of the DSN: :meth:`Dsn.with_password_from_env` fills it
from an environment variable (the CLI uses ``BRIDGE_UPSTREAM_PASSWORD``).
:meth:`Dsn.redacted` is the form for logs and errors: it never shows the
password, and neither do ``str()``, ``repr()`` nor any error raised here.
"""

from __future__ import annotations

import os
import sqlite3
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from bridge.errors import ConfigError

__all__ = [
    "MYSQL_PARAMS",
    "PASSWORD_ENV",
    "SQLITE_DEFAULT_DATABASE",
    "SSL_MODES",
    "Dsn",
    "connect_sqlite",
    "parse_dsn",
    "parse_mysql_dsn",
]

PASSWORD_ENV = "BRIDGE_UPSTREAM_PASSWORD"  # noqa: S105 - the variable's name, not a password

_MYSQL_SCHEMES = ("mysql", "mariadb")
SSL_MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")
_SSL_FILES = ("ssl-ca", "ssl-cert", "ssl-key")
TIMEOUT_PARAMS = ("connect_timeout", "read_timeout", "write_timeout")
MYSQL_PARAMS = frozenset(("charset", *TIMEOUT_PARAMS, "unix_socket", "ssl-mode", *_SSL_FILES))
SQLITE_DEFAULT_DATABASE = "main"  # SQLite's name for a file's own schema
_MYSQL_FORM = "mysql://user[:password]@host[:port]/database"
_SQLITE_FORM = "sqlite:///absolute/path.db or sqlite:relative/path.db"


@dataclass(frozen=True)
class Dsn:
    """A parsed upstream address. ``scheme`` is ``"sqlite"`` or ``"mysql"``.

    For SQLite ``path`` and, when the DSN names one (``?database=``),
    ``database`` (see :attr:`sqlite_database`); for MySQL ``host``, ``port``,
    ``user``, ``password`` and ``database`` (which may be empty: no default
    database).
    """

    scheme: str
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = field(default="", repr=False)
    database: str = ""
    path: str = ""
    params: tuple[tuple[str, str], ...] = ()  # MySQL: the ?key=value parameters, in order

    @property
    def is_sqlite(self) -> bool:
        return self.scheme == "sqlite"

    @property
    def is_mysql(self) -> bool:
        return self.scheme == "mysql"

    @property
    def sqlite_database(self) -> str:
        """The database name a SQLite upstream reports: ``?database=``, else ``main``."""
        return self.database or SQLITE_DEFAULT_DATABASE

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
            text = f"sqlite://{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
            return text + (f"?database={quote(self.database, safe='')}" if self.database else "")
        auth = quote(self.user, safe="") + (":***" if self.password else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in self.params)
        return f"mysql://{auth}@{host}:{self.port}/{quote(self.database, safe='')}" + (
            f"?{query}" if query else ""
        )

    def param(self, name: str, default: str = "") -> str:
        """The value of ``?name=`` (one of :data:`MYSQL_PARAMS`), or ``default``."""
        return dict(self.params).get(name, default)

    @property
    def ssl_mode(self) -> str:
        """One of :data:`SSL_MODES`; when the DSN names none, ``verify-identity`` if it
        names a TLS file, else ``preferred``."""
        return _ssl_mode(dict(self.params))

    def pymysql_tls(self) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect`` that give this DSN's TLS mode.

        ``preferred`` is pymysql's own default (no arguments); ``disabled`` is
        ``ssl_disabled=True``. The other modes pass an :class:`ssl.SSLContext`
        built here, on every call (a renewed certificate file is read by the
        next connection): any ``ssl`` argument makes pymysql refuse a server
        without TLS (``OperationalError`` 2026) instead of falling back to
        plaintext. A file that cannot be loaded is a :class:`ConfigError`
        naming its parameter.
        """
        mode = self.ssl_mode
        if mode == "disabled":
            return {"ssl_disabled": True}
        if mode == "preferred":
            return {}
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = mode == "verify-identity"
        if mode == "required":
            context.verify_mode = ssl.CERT_NONE
        else:
            self._load_tls(context.load_verify_locations, "ssl-ca", self.param("ssl-ca"))
        if cert := self.param("ssl-cert"):
            self._load_tls(context.load_cert_chain, "ssl-cert", cert, self.param("ssl-key") or None)
        return {"ssl": context}

    def pymysql_args(
        self,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 0.0,
        write_timeout: float = 0.0,
        **extra: Any,
    ) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect`` to this MySQL DSN.

        Host, port, user, password, default database (none when the DSN names
        none), ``charset`` (``utf8mb4`` unless the DSN sets one),
        ``unix_socket``, the TLS mode (:meth:`pymysql_tls`) and the three
        timeouts: the DSN's ``?connect_timeout=``, ``?read_timeout=`` and
        ``?write_timeout=`` when given, else the caller's (0: no limit).
        ``extra`` adds or replaces arguments (``autocommit``, ``cursorclass``,
        ``database=None`` for no default database, a ``password`` kept outside
        the DSN, ...). Connections are opened by :func:`bridge.mysql.connect`.
        """
        timeouts = {"connect_timeout": connect_timeout, "read_timeout": read_timeout}
        timeouts["write_timeout"] = write_timeout
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database or None,
            "charset": self.param("charset", "utf8mb4"),
            "unix_socket": self.param("unix_socket") or None,
            **{name: float(self.param(name) or default) or None for name, default in timeouts.items()},
            **self.pymysql_tls(),
        }
        args.update(extra)
        return args

    def connect_sqlite(self, *, read_only: bool = False, **extra: Any) -> sqlite3.Connection:
        """A new sqlite3 connection to this SQLite DSN's file; see :func:`connect_sqlite`."""
        return connect_sqlite(self.path, read_only=read_only, **extra)

    def _load_tls(self, loader: Callable[..., None], name: str, *files: str | None) -> None:
        """``loader(*files)``, one of an SSLContext's; a failure is a ConfigError naming ``name``."""
        try:
            loader(*files)
        except OSError as exc:  # ssl.SSLError too: not PEM, or a key that does not match
            given = ", ".join(repr(path) for path in files if path)
            raise ConfigError(f"{self.redacted()}: {name}: cannot load {given}: {exc}") from exc

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


def connect_sqlite(path: str | Path, *, read_only: bool = False, **extra: Any) -> sqlite3.Connection:
    """A new sqlite3 connection to the file at ``path``; sqlite3's errors pass through.

    ``read_only`` opens it with ``mode=ro``: writes fail and a missing file is
    an error instead of a new empty database. ``extra`` goes to
    ``sqlite3.connect`` (``timeout``, ``isolation_level``, ``check_same_thread``, ...).
    """
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if read_only else path
    connection: sqlite3.Connection = sqlite3.connect(target, uri=read_only, **extra)
    return connection


def parse_mysql_dsn(text: str, *, key: str = "dsn") -> Dsn:
    """Like :func:`parse_dsn`, but only a ``mysql://`` (or ``mariadb://``) DSN is accepted."""
    if text.strip().partition(":")[0].lower() not in _MYSQL_SCHEMES:
        raise ConfigError(f"{key}: expected {_MYSQL_FORM}")
    return parse_dsn(text, key=key)


def _parse_sqlite(text: str, key: str) -> Dsn:
    rest, _, query = text[len("sqlite:") :].partition("?")
    if rest.startswith("//"):
        url = urlsplit("sqlite:" + rest)
        if url.netloc:
            raise ConfigError(f"{key}: a SQLite DSN has no host; expected {_SQLITE_FORM}")
        path = unquote(url.path)
    else:
        path = unquote(rest)
    if not path or path.endswith("/"):
        raise ConfigError(f"{key}: no database file; expected {_SQLITE_FORM}")
    return Dsn(scheme="sqlite", path=path, database=_sqlite_database(query, key))


def _sqlite_database(query: str, key: str) -> str:
    """The ``?database=`` of a SQLite DSN ("" when absent); any other parameter is refused."""
    database = ""
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name != "database":
            raise ConfigError(f"{key}: unknown parameter {name!r} of a SQLite DSN (known: database)")
        if not 0 < len(value) <= 64 or not value.isprintable():
            raise ConfigError(f"{key}: database must be 1 to 64 printable characters")
        database = value
    return database


def _parse_mysql(text: str, key: str) -> Dsn:
    try:
        url = urlsplit(text)
        port = url.port or 3306
    except ValueError:
        raise ConfigError(f"{key}: expected {_MYSQL_FORM}") from None
    if not url.hostname:
        raise ConfigError(f"{key}: no host; expected {_MYSQL_FORM}")
    if url.fragment:
        raise ConfigError(f"{key}: a MySQL DSN takes no #fragment; expected {_MYSQL_FORM}")
    params = tuple(parse_qsl(url.query, keep_blank_values=True))
    for name, value in params:
        if name not in MYSQL_PARAMS:
            known = ", ".join(sorted(MYSQL_PARAMS))
            raise ConfigError(f"{key}: unknown parameter {name!r} (known: {known})")
        if name in TIMEOUT_PARAMS and not _is_seconds(value):
            raise ConfigError(f"{key}: {name} must be a number of seconds")
    _check_tls(dict(params), key)
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
        params=params,
    )


def _check_tls(params: dict[str, str], key: str) -> None:
    """Refuse TLS parameters that contradict each other or would be ignored."""
    mode = _ssl_mode(params)
    if mode not in SSL_MODES:
        raise ConfigError(f"{key}: ssl-mode must be one of {', '.join(SSL_MODES)}")
    files = [name for name in _SSL_FILES if name in params]
    if mode == "disabled" and files:
        raise ConfigError(f"{key}: {files[0]} is given but ssl-mode=disabled turns TLS off")
    if mode.startswith("verify-") and not params.get("ssl-ca"):
        implied = "" if "ssl-mode" in params else " (the default with ssl-cert)"
        raise ConfigError(f"{key}: ssl-mode={mode}{implied} needs ssl-ca (the CA certificate file)")
    if "ssl-ca" in params and not mode.startswith("verify-"):
        raise ConfigError(f"{key}: ssl-ca is used only by ssl-mode=verify-ca or verify-identity")
    if "ssl-cert" in params and mode == "preferred":
        raise ConfigError(f"{key}: ssl-cert needs ssl-mode=required, verify-ca or verify-identity")
    if "ssl-key" in params and not params.get("ssl-cert"):
        raise ConfigError(f"{key}: ssl-key needs ssl-cert (the client certificate file)")
    for name in files:
        if not os.path.isfile(params[name]):
            raise ConfigError(f"{key}: {name}: no such file {params[name]!r}")


def _ssl_mode(params: dict[str, str]) -> str:
    """The DSN's mode; verifying by default when it names a CA or a client certificate."""
    if "ssl-mode" in params:
        return _normal_ssl_mode(params["ssl-mode"])
    return "verify-identity" if "ssl-ca" in params or "ssl-cert" in params else "preferred"


def _normal_ssl_mode(text: str) -> str:
    # The MySQL clients spell the modes VERIFY_CA; accept that spelling too.
    return text.strip().lower().replace("_", "-")


def _is_seconds(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False
