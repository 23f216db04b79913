"""Delivery: commands queued in order, sent as non-transactional pipelines.

:class:`Delivery` keeps the commands of the events written since the last
pipeline, in the order the events produced them, and sends them as one
pipeline (``MULTI`` is never used: a pipeline is only many commands per
round trip) when ``batch-commands`` commands or keys wait, when the oldest
waited ``batch-interval``, and at every flush. So batches span transactions,
and the commands of one key reach Redis in commit order.

Consecutive invalidations merge into one ``UNLINK``/``DEL`` of up to
``del-batch-keys`` keys: deleting is idempotent and nothing else touches
those keys in between, so merging keeps the order per key. In a cluster the
merged keys are grouped by hash slot (one command per slot), and
redis-py's cluster pipeline sends each node its commands in one round trip.

Position: :attr:`complete` is the highest commit_ts whose every command is
queued or sent; once a pipeline's replies are all successes, :attr:`durable`
moves to the ``complete`` it was sent with. A failed pipeline raises
(:class:`SinkUnavailable` for connection errors, timeouts and replies such as
LOADING, OOM, CLUSTERDOWN; :class:`SinkApplyError` for refusals such as
WRONGTYPE, naming the table, commit_ts and command, never a key or value)
and leaves ``durable`` where it was; the caller discards the rest.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException
from redis.utils import HIREDIS_AVAILABLE

from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from drainer.sinks.redis.client import Client
from drainer.sinks.redis.metrics import RedisMetrics

Command = tuple[object, ...]
Key = str | bytes  # bytes: keys found by SCAN, sent back as they came (they need not be UTF-8)

# Reply errors that say "not now" rather than "never": the flush fails and is retried.
_RETRIABLE_REPLIES = ("LOADING", "BUSY", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MOVED", "ASK")  # fmt: skip


class Origin(NamedTuple):
    """Where a command came from, for error messages: never a key or a value."""

    commit_ts: int
    table: str
    mode: str


class _Sent(NamedTuple):
    """A standalone pipeline written to its connection whose replies are not read yet."""

    connection: Any  # a redis.connection.AbstractConnection of the client's pool
    commands: list[Command]
    origins: list[Origin]
    complete: int
    keys: collections.Counter[str]
    messages: collections.Counter[str]
    started: float


_pack_command: Callable[[Any], bytes] | None = None
if HIREDIS_AVAILABLE:
    import hiredis

    _pack_command = hiredis.pack_command


def _packed(connection: Any, commands: list[Command]) -> bytes:
    """The RESP bytes of ``commands``: hiredis's packer, which redis-py itself uses when hiredis is
    installed, called once per command without redis-py's per-argument Python pass (the sink's
    arguments are only str, bytes and int); redis-py's own packing otherwise and for anything else."""
    if _pack_command is not None:
        try:
            return b"".join(map(_pack_command, commands))
        except TypeError:
            pass  # redis-py's packer raises its DataError for it
    return b"".join(connection.pack_commands(commands))


class Delivery:
    """See the module docstring. Used from the sink's thread only."""

    def __init__(
        self,
        client: Client,
        metrics: RedisMetrics,
        *,
        unlink: bool,
        batch_commands: int,
        batch_interval: float,
        del_batch_keys: int,
        position: int = 0,
    ) -> None:
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        # standalone: pipelines are written on this pool's connections directly
        self._pool: Any = None if isinstance(client, RedisCluster) else client.connection_pool
        self.metrics = metrics
        self.delete_command = "UNLINK" if unlink else "DEL"
        self.batch_commands = batch_commands
        self.batch_interval = batch_interval
        self.del_batch_keys = del_batch_keys
        self.complete = self.durable = position
        self.size = 0  # commands and merged keys waiting
        self._since = 0.0  # when the oldest waiting command was queued
        self._commands: list[Command] = []
        self._origins: list[Origin] = []
        self._run: list[Key] = []  # consecutive keys to delete, not yet made into commands
        self._run_origin = Origin(0, "", "")
        self._keys: collections.Counter[str] = collections.Counter()  # keys by mode, counted on success
        self._messages: collections.Counter[str] = collections.Counter()
        self._invalidated = 0  # keys queued by invalidate(), counted in _keys at send
        self._sent: _Sent | None = None  # standalone: the pipeline whose replies are still to read

    # -- queueing -------------------------------------------------------------

    def delete(self, keys: Iterable[Key], origin: Origin) -> None:
        """Queue the deletion of ``keys`` (merged with the deletions queued just before)."""
        run = self._run
        before = len(run)
        if not before and not self.size:
            self._since = time.monotonic()
        if not before:
            self._run_origin = origin
        run.extend(keys)
        added = len(run) - before
        self.size += added
        self._keys[origin.mode] += added

    def invalidate(self, keys: list[str], commit_ts: int, table: str) -> None:
        """:meth:`delete` of ``keys`` for the ``invalidate`` mode of ``table`` (the fast path: the
        origin is built only when a new run of deletions starts)."""
        run = self._run
        if not run:
            if not self.size:
                self._since = time.monotonic()
            self._run_origin = Origin(commit_ts, table, "invalidate")
        run += keys
        added = len(keys)
        self.size += added
        self._invalidated += added

    def add(self, command: Command, origin: Origin, keys: int = 0, messages: int = 0) -> None:
        """Queue one command; ``keys``/``messages``: what it counts as in the metrics."""
        if self._run:
            self._close_run()
        if not self.size:
            self._since = time.monotonic()
        self._commands.append(command)
        self._origins.append(origin)
        self.size += 1
        if keys:
            self._keys[origin.mode] += keys
        if messages:
            self._messages[origin.mode] += messages

    def complete_through(self, commit_ts: int) -> None:
        """Every command of the events up to ``commit_ts`` is queued (or sent)."""
        self.complete = commit_ts
        if not self.size and self._sent is None:
            self.durable = max(self.durable, commit_ts)

    def due(self) -> bool:
        """Whether a pipeline should go now (size or age)."""
        if self.size >= self.batch_commands:
            return True
        return self.size > 0 and time.monotonic() - self._since >= self.batch_interval

    def _close_run(self) -> None:
        keys, self._run = self._run, []
        name, step, origin = self.delete_command, self.del_batch_keys, self._run_origin
        if self.cluster:
            for group in _by_slot(keys):
                for start in range(0, len(group), step):
                    self._commands.append((name, *group[start : start + step]))
                    self._origins.append(origin)
            return
        for start in range(0, len(keys), step):
            self._commands.append((name, *keys[start : start + step]))
            self._origins.append(origin)

    # -- sending -----------------------------------------------------------------

    def send(self, wait: bool = True) -> None:
        """Send what waits as one pipeline; ``durable`` moves once every reply is a success.

        Standalone, with ``wait=False``, the replies are read only by the next :meth:`send` or
        :meth:`collect` (before anything else is sent), so the caller prepares the next pipeline
        while Redis executes this one; ``durable`` moves only when they are read."""
        if self._run:
            self._close_run()
        commands, origins = self._commands, self._origins
        complete = self.complete
        keys, messages = self._keys, self._messages
        if self._invalidated:
            keys["invalidate"] += self._invalidated
        self.discard()
        self.collect()
        if not commands:
            self.durable = max(self.durable, complete)
            return
        if not self.cluster:
            self._sent = self._write(commands, origins, complete, keys, messages)
            if wait:
                self.collect()
            return
        started = time.perf_counter()
        replies = self._execute(commands, origins)
        self._check(replies, commands, origins, complete, keys, messages, started)

    def _check(
        self,
        replies: list[object],
        commands: list[Command],
        origins: list[Origin],
        complete: int,
        keys: collections.Counter[str],
        messages: collections.Counter[str],
        started: float,
    ) -> None:
        self.metrics.pipeline_seconds.observe(time.perf_counter() - started)
        self.metrics.pipeline_commands.observe(len(commands))
        for reply, origin, command in zip(replies, origins, commands, strict=True):
            if isinstance(reply, Exception):
                raise self._refused(reply, origin, command)
        self.durable = max(self.durable, complete)
        self._count(commands, keys, messages)

    def _write(
        self,
        commands: list[Command],
        origins: list[Origin],
        complete: int,
        keys: collections.Counter[str],
        messages: collections.Counter[str],
    ) -> _Sent:
        """Standalone: write the pipeline on a pooled connection (held until its replies are read)."""
        started = time.perf_counter()
        pool = self._pool
        try:
            connection = pool.get_connection()
        except (redis.RedisError, OSError) as exc:
            raise self.failure(exc, _describe(origins)) from exc
        try:
            connection.send_packed_command([_packed(connection, commands)])
        except BaseException as exc:
            connection.disconnect()
            pool.release(connection)
            if isinstance(exc, redis.RedisError | OSError):
                raise self.failure(exc, _describe(origins)) from exc
            raise
        return _Sent(connection, commands, origins, complete, keys, messages, started)

    def collect(self) -> None:
        """Read the replies of the pipeline sent without waiting, if any: ``durable`` moves when they
        are all successes; a failure raises as :meth:`send` does."""
        sent, self._sent = self._sent, None
        if sent is None:
            return
        connection = sent.connection
        replies: list[object] = []
        read = False
        try:
            for _ in sent.commands:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            read = True
        except (redis.RedisError, OSError) as exc:
            raise self.failure(exc, _describe(sent.origins)) from exc
        finally:
            if not read:
                connection.disconnect()  # replies left unread: the connection cannot be reused
            self._pool.release(connection)
        self._check(replies, sent.commands, sent.origins, sent.complete, sent.keys, sent.messages,
                    sent.started)  # fmt: skip

    def abandon(self) -> None:
        """Drop the pipeline sent without waiting (its replies unread): its connection is closed."""
        sent, self._sent = self._sent, None
        if sent is not None:
            sent.connection.disconnect()
            self._pool.release(sent.connection)

    def discard(self) -> None:
        """Forget every queued command."""
        self._commands, self._origins, self._run = [], [], []
        self._keys, self._messages = collections.Counter(), collections.Counter()
        self._invalidated = 0
        self.size = 0

    def reset(self) -> None:
        """After a failure: nothing waits, and nothing past ``durable`` counts as queued."""
        self.abandon()
        self.discard()
        self.complete = self.durable

    def _execute(self, commands: list[Command], origins: list[Origin]) -> list[object]:
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        try:
            return list(pipe.execute(raise_on_error=False))
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            raise self.failure(exc, _describe(origins)) from exc
        finally:
            pipe.reset()

    def failure(self, exc: BaseException, where: str) -> SinkError:
        """The sink error for a client exception raised while ``where``."""
        return client_failure(exc, where, self.metrics)

    def _refused(self, reply: Exception, origin: Origin, command: Command) -> SinkError:
        where = _describe([origin])
        text = str(reply)
        shape = f"{command[0]} ({origin.mode}, {len(command) - 1} arguments)"
        if text.startswith(_RETRIABLE_REPLIES) or isinstance(
            reply, redis.ConnectionError | redis.TimeoutError
        ):
            self.metrics.errors.labels("retriable").inc()
            return SinkUnavailable(f"redis sink: {where}: {shape}: {text}")
        self.metrics.errors.labels("refused").inc()
        return SinkApplyError(f"redis sink: {where}: Redis refused {shape}: {text}")

    def _count(
        self,
        commands: list[Command],
        keys: collections.Counter[str],
        messages: collections.Counter[str],
    ) -> None:
        names = collections.Counter(command[0] for command in commands)
        for name, count in names.items():
            self.metrics.commands.labels(name).inc(count)
        for mode, count in keys.items():
            self.metrics.keys.labels(mode).inc(count)
        for mode, count in messages.items():
            self.metrics.messages.labels(mode).inc(count)

    # -- scanning ----------------------------------------------------------------------

    def scan(self, pattern: str) -> Iterator[bytes]:
        """Every key matching ``pattern`` (on every master in a cluster); errors as :meth:`failure`."""
        try:
            yield from self.client.scan_iter(match=pattern, count=1000)
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            raise self.failure(exc, f"SCAN MATCH {pattern!r}") from exc


def client_failure(exc: BaseException, where: str, metrics: RedisMetrics) -> SinkError:
    """The sink error for a redis-py exception raised while ``where`` (counted in ``metrics``):
    refused credentials stop the drainer; everything else is retried."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        metrics.errors.labels("refused").inc()
        return SinkApplyError(f"redis sink: {where}: Redis refused the credentials: {text}")
    if isinstance(exc, redis.TimeoutError):
        kind = "timeout"
    elif isinstance(exc, redis.ConnectionError | OSError):
        kind = "connection"
    else:
        kind = "retriable"
    metrics.errors.labels(kind).inc()
    return SinkUnavailable(f"redis sink: {where}: {text}")


def _by_slot(keys: list[Key]) -> list[list[Key]]:
    """``keys`` grouped by cluster hash slot, each group in the order given."""
    groups: dict[int, list[Key]] = {}
    for key in keys:
        groups.setdefault(key_slot(key if isinstance(key, bytes) else key.encode()), []).append(key)
    return list(groups.values())


def _describe(origins: list[Origin]) -> str:
    """``commit_ts A..B: table T`` for the commands of a failed pipeline."""
    stamped = [o for o in origins if o.commit_ts]
    if not stamped:
        return "a pipeline"
    low, high = stamped[0].commit_ts, stamped[-1].commit_ts
    tables = sorted({o.table for o in stamped if o.table})
    span = f"commit_ts {low}" if low == high else f"commit_ts {low}..{high}"
    named = ", ".join(tables[:3]) + (f" and {len(tables) - 3} more" if len(tables) > 3 else "")
    return f"{span}: table {named}" if named else span
