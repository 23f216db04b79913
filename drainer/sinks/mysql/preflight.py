"""The MySQL sink's pre-flight check (:meth:`bridge.sink.contract.Sink.check`).

It logs in with the sink's DSN, reads ``SHOW GRANTS`` and requires every
privilege replication uses (:data:`NEEDED`) to be granted on some database
(or globally): tables land in databases named after the upstream's, which
are not known before the first event. It then creates the progress schema
and table when missing, as ``open`` would (that proves CREATE and INSERT
there). Grants given through roles are not read: such a user fails the
check, and ``drainer --check`` says which privileges it did not find.
"""

from __future__ import annotations

import re
from typing import Any

from bridge.sink.errors import SinkCheckFailed
from drainer.sinks.mysql.connection import close_quietly, describe
from drainer.sinks.mysql.control import Control
from drainer.sinks.mysql.workers import DB_ERRORS

NEEDED = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP")
_GRANT = re.compile(r"^GRANT (?P<privileges>.+?) ON (?P<target>\S+) TO ", re.IGNORECASE)


def granted(grant_lines: list[str]) -> set[str]:
    """The privileges ``SHOW GRANTS`` lines give on any database (ALL PRIVILEGES: every one needed)."""
    found: set[str] = set()
    for line in grant_lines:
        match = _GRANT.match(line)
        if match is None:
            continue
        for privilege in match["privileges"].split(","):
            name = privilege.strip().upper()
            found.update(NEEDED if name.startswith("ALL") else (name,))
    return found


def check(control: Control, where: str) -> None:
    """Log in, check the grants, set up the progress table; :class:`SinkCheckFailed` names what failed."""
    try:
        conn = control.settings.connect(autocommit=True)
    except DB_ERRORS as exc:
        raise SinkCheckFailed(f"{where}: cannot log in: {describe(exc)}") from exc
    try:
        missing = [p for p in NEEDED if p not in granted(_grant_lines(conn))]
        if missing:
            raise SinkCheckFailed(
                f"{where}: the user lacks {', '.join(missing)} on every database "
                f"(replication needs {', '.join(NEEDED)})"
            )
        control.setup(conn)
    except DB_ERRORS as exc:
        raise SinkCheckFailed(f"{where}: {describe(exc)}") from exc
    finally:
        close_quietly(conn)


def _grant_lines(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        return [str(row[0]) for row in cur.fetchall()]
