"""Moved to :mod:`bridge.dsn`; this name is kept only until the drainer's MySQL sink and checkpoint
and ``consume --apply`` import it from there (issue 11), then it is deleted."""

from bridge.dsn import MYSQL_PARAMS, PASSWORD_ENV, SSL_MODES, Dsn, parse_dsn

__all__ = ["MYSQL_PARAMS", "PASSWORD_ENV", "SSL_MODES", "Dsn", "parse_dsn"]
