"""The load's tables and transactions.

Tables (the same DDL on MySQL and SQLite; every type maps on both):

- ``load_accounts`` — a fixed set of shared accounts (``--accounts``): every
  worker's transfers update them, so transactions conflict on row locks;
- ``load_orders`` — each worker's own rows (disjoint id ranges): inserts,
  updates, deletes and primary-key changes; decimals, unsigned, TIMESTAMP,
  DATE, TIME, TEXT, VARBINARY;
- ``load_events`` — **no primary key**: appended by every transaction kind,
  updated and deleted by ``ref``;
- ``load_docs`` — text-heavy documents (title, body of 40-250 words, tags,
  JSON metadata) for search indexes;
- ``load_wide`` — the table the schema changes act on (columns added and
  dropped while workers write it);
- ``load_slots`` — each worker's own rows with a NOT NULL UNIQUE ``slot``:
  transactions swap (or rotate) the slots of a worker's rows through a
  temporary value, as an application must when a unique key is checked per
  statement; consumers keyed by unique keys must apply them in order.

A transaction is first *planned* from the worker's random generator and its
own key lists (:meth:`Worker.plan`), then run; a retry after a deadlock runs
the same plan, and the key lists change only once it committed. So one seed
gives the same sequence of planned transactions on every run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from bridge.producer.writer import Transaction

TABLES: dict[str, str] = {
    "load_accounts": (
        "CREATE TABLE IF NOT EXISTS load_accounts (id BIGINT NOT NULL PRIMARY KEY, "
        "owner VARCHAR(64) NOT NULL, balance DECIMAL(12,2) NOT NULL DEFAULT 0, "
        "version INT NOT NULL DEFAULT 0, updated DATETIME(6) NOT NULL, flags BIT(8) NULL, "
        "region CHAR(2) NULL)"
    ),
    "load_orders": (
        "CREATE TABLE IF NOT EXISTS load_orders (id BIGINT NOT NULL PRIMARY KEY, account_id BIGINT NOT NULL, "
        "amount DECIMAL(10,2) NOT NULL, qty SMALLINT UNSIGNED NOT NULL, status VARCHAR(16) NOT NULL, "
        "placed TIMESTAMP(3) NULL, ship_date DATE NULL, slot TIME NULL, note TEXT NULL, "
        "payload VARBINARY(32) NULL)"
    ),
    "load_events": (
        "CREATE TABLE IF NOT EXISTS load_events (kind VARCHAR(16) NOT NULL, ref BIGINT NOT NULL, "
        "seq INT NOT NULL, at DATETIME(3) NOT NULL, score DOUBLE NULL, data VARBINARY(64) NULL)"
    ),
    "load_docs": (
        "CREATE TABLE IF NOT EXISTS load_docs (id BIGINT NOT NULL PRIMARY KEY, title VARCHAR(200) NOT NULL, "
        "body TEXT NOT NULL, tags VARCHAR(255) NOT NULL, lang CHAR(2) NOT NULL, meta JSON NULL, "
        "revised DATETIME NOT NULL)"
    ),
    "load_wide": (
        "CREATE TABLE IF NOT EXISTS load_wide (id BIGINT NOT NULL PRIMARY KEY, a INT NULL, b DOUBLE NULL, "
        "c VARCHAR(32) NULL)"
    ),
    "load_slots": (
        "CREATE TABLE IF NOT EXISTS load_slots (id BIGINT NOT NULL PRIMARY KEY, slot BIGINT NOT NULL, "
        "holder VARCHAR(32) NOT NULL, moved DATETIME(6) NULL)"
    ),
}
# index name -> (table, CREATE statement): created once, after the tables
INDEXES: dict[str, tuple[str, str]] = {
    "load_events_ref": ("load_events", "CREATE INDEX load_events_ref ON load_events (ref)"),
    "load_slots_slot": ("load_slots", "CREATE UNIQUE INDEX load_slots_slot ON load_slots (slot)"),
}
OWNED = ("load_orders", "load_docs", "load_wide")  # tables edit/remove/rekey act on, owned by id range
KEYED = (*OWNED, "load_slots")  # every table whose ids a worker allocates from its own range

_BASE_TIME = datetime(2020, 1, 1)
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "zu", "per", "qua", "bri", "dge", "lin", "og")


def _word(i: int) -> str:
    rng = random.Random(f"word:{i}")  # noqa: S311 - reproducible test data
    return "".join(rng.choices(_SYLLABLES, k=1 + i % 4))


_WORDS = tuple(_word(i) for i in range(400))
_STATUSES = ("new", "paid", "packed", "shipped", "returned")
_LANGS = ("en", "de", "fr", "ja", "pt")

Step = Callable[[Transaction], None]


@dataclass
class Plan:
    """A planned transaction: its steps, and what to remember once it committed."""

    kind: str
    steps: list[Step] = field(default_factory=list)
    added: list[tuple[str, int]] = field(default_factory=list)
    removed: list[tuple[str, int]] = field(default_factory=list)
    slots: dict[int, int] = field(default_factory=dict)  # load_slots id -> its slot once committed

    def run(self, txn: Transaction) -> None:
        for step in self.steps:
            step(txn)


class KeySpace:
    """Ids of one owned table for one worker: ``base + n * stride + offset``, and those alive."""

    def __init__(self, base: int, stride: int, offset: int) -> None:
        self._next = base + offset
        self._stride = stride
        self.live: list[int] = []

    def allocate(self) -> int:
        key, self._next = self._next, self._next + self._stride
        return key


class Worker:
    """Plans one worker's transactions (see the module docstring)."""

    def __init__(self, index: int, workers: int, seed: int, bases: dict[str, int], accounts: int) -> None:
        self.rng = random.Random(f"{seed}:{index}")  # noqa: S311 - reproducible test data
        self.keys = {table: KeySpace(bases[table], workers, index) for table in KEYED}
        self.slots: dict[int, int] = {}  # the slot each of this worker's live load_slots rows holds
        self.accounts = accounts
        self.index = index
        self._event_seq = 0

    def commit(self, plan: Plan) -> None:
        """The plan committed: remember the rows it added and forget those it removed."""
        for table, key in plan.added:
            self.keys[table].live.append(key)
        for table, key in plan.removed:
            live = self.keys[table].live
            if key in live:
                live.remove(key)
        self.slots.update(plan.slots)

    # --- values -------------------------------------------------------------------------

    def _text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(_WORDS, k=self.rng.randint(low, high)))

    def when(self) -> datetime:
        return _BASE_TIME + timedelta(
            seconds=self.rng.randrange(10**8), microseconds=self.rng.randrange(10**6)
        )

    def _money(self, limit: int) -> Decimal:
        return Decimal(self.rng.randrange(1, limit * 100)) / 100

    def order_row(self, key: int) -> dict[str, object]:
        rng = self.rng
        return {
            "id": key,
            "account_id": rng.randint(1, self.accounts),
            "amount": self._money(10_000),
            "qty": rng.randint(1, 65_535),
            "status": rng.choice(_STATUSES),
            "placed": self.when().replace(microsecond=rng.randrange(1000) * 1000, tzinfo=UTC),
            "ship_date": date(2020, 1, 1) + timedelta(days=rng.randrange(3650))
            if rng.random() < 0.7
            else None,
            "slot": timedelta(seconds=rng.randrange(-3600 * 800, 3600 * 800)),
            "note": self._text(0, 12) if rng.random() < 0.5 else None,
            "payload": rng.randbytes(rng.randint(0, 32)),
        }

    def event_row(self, kind: str, ref: int) -> dict[str, object]:
        self._event_seq += 1
        rng = self.rng
        return {
            "kind": kind,
            "ref": ref,
            "seq": self._event_seq % 1000,  # repeats on purpose: identical rows are legal here
            "at": self.when().replace(microsecond=rng.randrange(1000) * 1000),
            "score": rng.random() * 100 if rng.random() < 0.8 else None,
            "data": rng.randbytes(rng.randint(0, 16)) if rng.random() < 0.5 else None,
        }

    def doc_row(self, key: int) -> dict[str, object]:
        rng = self.rng
        return {
            "id": key,
            "title": self._text(2, 10)[:200],
            "body": self._text(40, 250),
            "tags": ",".join(rng.sample(_WORDS, rng.randint(0, 6)))[:255],
            "lang": rng.choice(_LANGS),
            "meta": {"words": rng.randint(0, 999), "draft": rng.random() < 0.2}
            if rng.random() < 0.6
            else None,
            "revised": self.when().replace(microsecond=0),
        }

    def account_row(self, key: int) -> dict[str, object]:
        return {
            "id": key,
            "owner": self._text(1, 3)[:64],
            "balance": self._money(1000),
            "updated": self.when(),
            "flags": self.rng.randrange(256),
            "region": self.rng.choice(("eu", "us", "ap", None)),
        }

    def slot_row(self, key: int) -> dict[str, object]:
        """A new load_slots row: its slot starts as its own id (unique, as ids are), and swaps
        only permute the slots among the worker's rows, so no two rows ever share one."""
        return {"id": key, "slot": key, "holder": self._text(1, 2)[:32], "moved": None}

    def wide_row(self, key: int) -> dict[str, object]:
        rng = self.rng
        return {
            "id": key,
            "a": rng.randint(-(2**31), 2**31 - 1),
            "b": rng.random(),
            "c": self._text(1, 3)[:32],
        }
