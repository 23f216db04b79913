"""``binlog-bridge load`` options and the transaction mix.

The mix weighs the kinds of transaction a worker runs (``--mix
transfer=30,order=20,...``; kinds left out keep their default weight, weight 0
turns a kind off):

==========  ========  ==================================================================
kind        default   what one transaction does
==========  ========  ==================================================================
transfer    30        moves money between two shared accounts (UPDATE x2, rows locked in
                      id order) and records an order and an event: three tables
order       20        inserts 1..txn-size orders of the worker's own, with events
edit        20        updates 1..txn-size of the worker's rows (orders, docs, wide)
remove      10        deletes some of the worker's orders and their events (keyless table)
rekey       5         changes primary keys: moves an order, doc or wide row to a new id
doc         14        inserts or rewrites a text-heavy document (titles, bodies, tags, JSON)
large       1         inserts ``large-size`` orders and events, updates a tenth of them
swap        5         swaps the unique slots of two of the worker's rows (or rotates three)
                      through a temporary value; inserts two rows while it has few
==========  ========  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.errors import ConfigError

DEFAULT_MIX: dict[str, int] = {
    "transfer": 30,
    "order": 20,
    "edit": 20,
    "remove": 10,
    "rekey": 5,
    "doc": 14,
    "large": 1,
    "swap": 5,
}


def parse_mix(text: str, key: str = "--mix") -> dict[str, int]:
    """``"transfer=30,large=0"`` -> the default mix with those weights replaced."""
    mix = dict(DEFAULT_MIX)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = part.partition("=")
        name = name.strip()
        if not sep or name not in DEFAULT_MIX:
            raise ConfigError(
                f"{key}: expected kind=weight with kind one of {', '.join(DEFAULT_MIX)}; got {part!r}"
            )
        try:
            mix[name] = int(weight)
        except ValueError:
            raise ConfigError(f"{key}: the weight of {name!r} must be an integer, got {weight!r}") from None
        if mix[name] < 0:
            raise ConfigError(f"{key}: the weight of {name!r} cannot be negative")
    if not any(mix.values()):
        raise ConfigError(f"{key}: every weight is 0; nothing to run")
    return mix


@dataclass
class LoadOptions:
    """What one ``binlog-bridge load`` run does; see ``binlog-bridge load --help``."""

    seconds: float = 10.0
    rate: float = 0.0  # transactions per second over all workers; 0 = as fast as they go
    concurrency: int = 4
    seed: int = 1
    mix: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MIX))
    txn_size: int = 4  # most row changes of an ordinary transaction
    large_size: int = 500  # row changes of a large transaction
    ddl: bool = True
    ddl_interval: float = 1.0  # seconds between schema changes
    accounts: int = 200  # shared accounts the transfers conflict on
    attempts: int = 3  # tries of one transaction on retriable errors (deadlocks)

    def validate(self) -> None:
        checks = (
            ("--seconds", self.seconds > 0),
            ("--rate", self.rate >= 0),
            ("--concurrency", 1 <= self.concurrency <= 256),
            ("--txn-size", self.txn_size >= 1),
            ("--large-size", self.large_size >= 1),
            ("--ddl-interval", self.ddl_interval > 0),
            ("--accounts", self.accounts >= 2),
            ("--attempts", self.attempts >= 1),
        )
        for flag, ok in checks:
            if not ok:
                raise ConfigError(f"{flag}: out of range ({getattr(self, flag[2:].replace('-', '_'))!r})")
