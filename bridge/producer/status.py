"""``bridge_txn_status``: which transactions committed upstream, and at which commit_ts.

::

    bridge_txn_status(start_ts BIGINT PRIMARY KEY, commit_ts BIGINT NOT NULL)

The writer inserts a transaction's row inside that same upstream transaction,
after taking its commit_ts and just before COMMIT, so the row exists exactly
when the transaction committed. A pump whose Prewrite never got its Commit
binlog asks this table (``pump/resolver.py``), and the writer itself asks it
after a COMMIT whose answer was lost (:func:`committed_ts`).
"""

from __future__ import annotations

from bridge.producer.upstream import Session

STATUS_TABLE = "bridge_txn_status"


def record_commit(session: Session, start_ts: int, commit_ts: int) -> None:
    """Inside the transaction, before COMMIT: remember that ``start_ts`` commits at ``commit_ts``."""
    d = session.dialect
    sql = f"INSERT INTO {d.quote(STATUS_TABLE)} (start_ts, commit_ts) VALUES ({d.param}, {d.param})"  # noqa: S608
    session.execute(sql, [start_ts, commit_ts])


def committed_ts(session: Session, start_ts: int) -> int | None:
    """The commit_ts recorded for ``start_ts``, or None when that transaction did not commit.

    The read share-locks the row (MySQL), so while the transaction that
    inserted it is still open the read waits for its outcome instead of
    answering "not committed" too early.
    """
    d = session.dialect
    sql = f"SELECT commit_ts FROM {d.quote(STATUS_TABLE)} WHERE start_ts = {d.param}{d.lock_shared}"  # noqa: S608
    session.begin()
    try:
        rows = session.query(sql, [start_ts])
    finally:
        session.rollback()
    return int(rows[0][0]) if rows else None


def purge_before(session: Session, ts: int) -> int:
    """Delete the rows of transactions that started before ``ts``; how many went.

    Safe once every pump settled those transactions: keep at least the pumps'
    ``max-txn-timeout`` worth of rows.
    """
    d = session.dialect
    session.begin()
    try:
        count = session.execute(f"DELETE FROM {d.quote(STATUS_TABLE)} WHERE start_ts < {d.param}", [ts])  # noqa: S608
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return count
