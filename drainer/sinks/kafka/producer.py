"""The kafka sink's producer: librdkafka's ``Producer``, its delivery reports and its failures.

:class:`ProducerLink` owns the producer (idempotent, ``acks=all``) and
produces each message into a :class:`~bridge.sink.acks.Batch` of
the :class:`~bridge.sink.acks.AckTracker`, which turns the
reports into the acknowledged position. A full queue makes ``send`` wait
(polling); a fatal producer error is recorded and the producer replaced
before the next write (it delivers nothing more). Every librdkafka callback
(delivery reports, errors, statistics) is only queued while librdkafka runs
it and handled once ``poll``/``flush``/``close`` returned: inside librdkafka's
serve loop a handler taking a lock (metrics, logging) was seen to leave it
held for good when the producer failed fatally meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from bridge.errors import ConfigError
from bridge.kafkaclient import redacted
from bridge.sink.acks import AckTracker, Batch, Failure
from bridge.sink.batching import Warnings
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from drainer.sinks.kafka.config import KafkaSinkConfig, producer_settings
from drainer.sinks.kafka.metrics import KafkaMetrics
from drainer.sinks.kafka.topics import TableTopics

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("drainer.sinks.kafka.librdkafka")  # librdkafka's own log lines

Headers = list[tuple[str, str | bytes | None]]
Report = Callable[[KafkaError | None, Message], None]

# Delivery errors that retrying cannot mend.
REFUSED = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.INVALID_CONFIG,
        KafkaError._INVALID_ARG,
    }
)
# The topic (or a partition of it) is gone, e.g. a broker that lost it: look it up again.
_UNKNOWN_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
# The broker fenced the producer's id (e.g. after messages timed out while it was unreachable):
# this producer delivers nothing more, a new one (a new id) is started as after a fatal error.
_FENCED = frozenset({KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
# Produce requests cost the broker far more per request than per message (Tansu here: ~280 us a
# request, ~2 us a message; docs/benchmarks.md): below this many messages per `linger` the sink
# sends each write at once, above it requests fill for up to `linger` (or until the next flush).
FILL_MESSAGES = 128
SEND_WAIT = 0.005  # the longest a write waits for the acknowledgements of what it sent at once


def message_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """The bytes of a message as ``max-message-bytes`` counts them: key, value, header names and values."""
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    for name, data in headers:
        size += len(name) + (0 if data is None else len(data))
    return size


class Pace:
    """Whether messages come fast enough to fill produce requests: at least ``fill`` of them within
    the last ``window`` seconds (two buckets of ``window`` approximate the sliding window)."""

    def __init__(self, window: float, fill: int) -> None:
        self._window = window
        self._fill = fill
        self._start = 0.0
        self._current = 0
        self._previous = 0

    def busy(self, count: int) -> bool:
        """``count`` more messages were produced just now."""
        now = time.monotonic()
        if now - self._start >= self._window:
            self._previous = self._current if now - self._start < 2 * self._window else 0
            self._current, self._start = 0, now
        self._current += count
        return self._previous + self._current >= self._fill


class ProducerLink:
    """The producer of one sink and what its reports say; see the module docstring."""

    def __init__(
        self, config: KafkaSinkConfig, tracker: AckTracker, topics: TableTopics, warn: Warnings
    ) -> None:
        self.config = config
        self.tracker = tracker
        self.topics = topics
        self.warn = warn
        self.fatal: KafkaError | None = None
        self.batch: Batch | None = None  # the batch being produced (see batch_of)
        self.delivered: Counter[str] = Counter()  # acknowledged messages by kind (row, tombstone, ...)
        self.on_acknowledged: Callable[[str, int, Message], None] | None = None
        self._producer: Producer | None = None
        self._pending: list[tuple[Callable[..., None] | None, tuple[Any, ...]]] = []  # see later, _report
        self._since_poll = 0
        self.produced = 0  # messages handed to librdkafka
        self.sent_at_once = 0  # writes sent without lingering (see sent)
        self.pace = Pace(config.linger, FILL_MESSAGES)
        self._retries_seen = 0
        self._requests_seen = 0  # Produce requests the statistics counted so far (see _on_stats)
        self._metrics: KafkaMetrics | None = None  # the sink's context's (use_metrics)
        self._counted: dict[tuple[str, str], Any] = {}
        self._bytes: dict[str, Any] = {}
        self._tally: dict[tuple[str, str], list[int]] = {}  # acknowledged messages, bytes: see count

    @property
    def metrics(self) -> KafkaMetrics:
        if self._metrics is None:
            raise SinkError("kafka sink: not open")
        return self._metrics

    def use_metrics(self, metrics: KafkaMetrics) -> None:
        """Count into ``metrics`` from now on (the sink opened with a context naming their registry)."""
        if metrics is not self._metrics:
            self._metrics = metrics
            self._counted.clear()
            self._bytes.clear()

    # -- the producer ----------------------------------------------------------

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise SinkError("kafka sink: not open")
        return self._producer

    @property
    def started(self) -> bool:
        return self._producer is not None

    def start(self) -> None:
        settings = producer_settings(self.config)
        try:
            self._producer = Producer(
                {
                    **settings,
                    "error_cb": functools.partial(self.later, self.on_error),
                    "stats_cb": functools.partial(self.later, self._on_stats),
                    "logger": _RDKAFKA_LOG,
                },
            )
        except KafkaException as exc:
            raise ConfigError(
                f"sink.kafka.producer: librdkafka refused the settings: {exc.args[0].str()}"
            ) from None
        log.info("kafka sink: producer settings %s", redacted(settings))

    def replace(self) -> None:
        """Drop a producer that failed fatally (it delivers nothing more) and start a new one."""
        assert self.fatal is not None
        log.error("kafka sink: the producer failed fatally (%s); starting a new one", self.fatal.str())
        old, self._producer = self._producer, None
        if old is not None:
            self._discard(old)
        self.fatal = None
        self.start()

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        left = (
            self.serve(producer.flush, min(self.config.delivery_timeout, 30.0)) if self.fatal is None else 1
        )
        if left:
            log.warning("kafka sink: closing with messages undelivered (the drainer writes them again)")
        self._discard(producer)

    def _discard(self, producer: Producer) -> None:
        """Drop a producer and whatever it still holds (its events are written again by the drainer)."""
        try:
            producer.purge()
            producer.close()
        except (KafkaException, RuntimeError, SystemError) as exc:  # SystemError: see serve
            log.warning("kafka sink: closing the producer: %s", exc)
        finally:
            self._run_later()  # the purged messages' reports

    # -- producing ------------------------------------------------------------------

    @contextlib.contextmanager
    def batch_of(self, commit_ts: int, what: str) -> Iterator[Batch]:
        """The messages produced inside form one batch of the delivery tracker (the checkpoint waits
        for all of them); an exception aborts it, naming ``what`` was being produced."""
        batch = self.batch = self.tracker.begin(commit_ts)
        try:
            yield batch
        except BaseException as exc:
            self.tracker.abort(batch, f"producing the {what} was cut short: {exc}")
            raise
        finally:
            self.batch = None
        self.tracker.close(batch)

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        kind: str,
        size: int = -1,
    ) -> None:
        """Produce one message of the batch at hand; ``size``: its :func:`message_size`, if known."""
        batch = self.batch
        assert batch is not None
        if size < 0:
            size = message_size(key, value, headers)
        report = functools.partial(self._report, batch, kind, size)
        producer = self._producer
        try:  # the common case first: librdkafka takes it at once (send: the queue full, waits)
            if producer is None:
                raise BufferError
            producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
        except BufferError:
            self.send(topic, partition, key, value, headers, report, batch)
        except KafkaException as exc:
            raise self._refused(exc.args[0], batch, topic) from None
        else:
            self._produced(producer)
        self.tracker.sent(batch)

    def send(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        report: Report,
        batch: Batch | None,
    ) -> None:
        """Hand one message to librdkafka, waiting (polling) while its queue is full."""
        producer = self.producer
        waited_since = 0.0
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
                break
            except BufferError:
                now = time.monotonic()
                waited_since = waited_since or now
                if now - waited_since > self.config.delivery_timeout + 30.0:
                    raise SinkUnavailable(
                        f"kafka sink: {self.where(batch, topic)}: the producer queue stayed full for "
                        f"{now - waited_since:.0f}s"
                    ) from None
                self.warn("queue", "kafka sink: producer queue full (%d messages); waiting", len(producer))
                self.serve(producer.poll, 0.05)
                if self.fatal is not None:
                    raise SinkUnavailable(
                        f"kafka sink: {self.where(batch, topic)}: the producer failed: {self.fatal.str()}"
                    ) from None
            except KafkaException as exc:
                raise self._refused(exc.args[0], batch, topic) from None
        self._produced(producer)

    def _produced(self, producer: Producer) -> None:
        """One message went to librdkafka: count it, and serve its callbacks every 256 messages."""
        self.produced += 1
        self._since_poll += 1
        if self._since_poll >= 256:
            self._since_poll = 0
            self.serve(producer.poll, 0)

    def sent(self, count: int) -> None:
        """A write produced ``count`` messages: unless they come fast enough to fill a produce request
        within ``linger`` (:class:`Pace`), have librdkafka send them at once instead of lingering. A
        flush ignores linger.ms, but only while it lasts: this waits up to ``SEND_WAIT`` for the
        acknowledgements (a pipeline that is not busy loses nothing by it)."""
        if count and not self.pace.busy(count) and self.config.linger > SEND_WAIT:
            self.sent_at_once += 1
            self.serve(self.producer.flush, SEND_WAIT)
        else:
            self.serve(self.producer.poll, 0)

    def _refused(self, error: KafkaError, batch: Batch | None, topic: str) -> SinkError:
        if error.fatal():
            self.fatal = error  # the drainer's next write replaces the producer
        where = self.where(batch, topic)
        text = f"kafka sink: {where}: cannot produce to {topic}: {error.name()}: {error.str()}"
        return SinkApplyError(text) if error.code() in REFUSED else SinkUnavailable(text)

    def where(self, batch: Batch | None, topic: str) -> str:
        if batch is None:
            return f"topic {topic}"
        return f"commit_ts {batch.commit_ts}: table {batch.table or self.topics.table_of(topic) or '-'}"

    # -- reports ----------------------------------------------------------------------

    def later(self, handler: Callable[..., None], *args: Any) -> None:
        """Where every librdkafka callback lands; the handlers run in :meth:`serve` (module docstring)."""
        self._pending.append((handler, args))

    def _report(self, batch: Batch, kind: str, size: int, error: KafkaError | None, message: Message) -> None:
        """A message's delivery report (as :meth:`later` of :meth:`on_delivery`; a row's, the most
        frequent callback, is handled in :meth:`_run_later`'s loop without the generic dispatch)."""
        self._pending.append((None, (batch, kind, size, error, message)))

    def _run_later(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, []
            observe = self.metrics.delivery_seconds.observe if self._metrics is not None else None
            tally = self._tally
            delivered = self.delivered
            acknowledged = self.tracker.acknowledged
            for handler, args in pending:
                if handler is not None:
                    handler(*args)
                    continue
                batch, kind, size, error, message = args
                if error is not None or kind != "row" or observe is None or self.on_acknowledged is not None:
                    self.on_delivery(*args)
                    continue
                # on_delivery of an acknowledged row message, inline (count's tally without the hook)
                latency = message.latency()
                if latency is not None:
                    observe(latency)
                topic = message.topic() or ""
                counts = tally.get((topic, "row"))
                if counts is None:
                    counts = tally[(topic, "row")] = [0, 0]
                counts[0] += 1
                counts[1] += size
                delivered["row"] += 1
                acknowledged(batch)
        self._add_counts()

    def serve(self, call: Callable[[float], int], timeout: float) -> int:
        """``producer.poll``/``flush``: a fatal producer error (raised from there) is recorded, so that
        the flush fails as retriable and a new producer is started; returns the call's result (0 then).
        The callbacks the call served run right after it."""
        try:
            return call(timeout)
        except (KafkaException, SystemError) as exc:
            # confluent-kafka may raise a fatal error while it calls one of our callbacks; Python then
            # reports the callback as having returned with an exception set (a SystemError from it)
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
            if not isinstance(cause, KafkaException):
                raise
            error: KafkaError = cause.args[0]
            self.fatal = error if error.fatal() else self.fatal
            self.tracker.fail(Failure(self.tracker.acked, "", "", f"{error.name()}: {error.str()}", True))
            self.warn("fatal", "kafka sink: the producer reported %s: %s", error.name(), error.str())
            return 0
        finally:
            self._run_later()

    def on_delivery(
        self, batch: Batch, kind: str, size: int, error: KafkaError | None, message: Message
    ) -> None:
        latency = message.latency()
        if latency is not None:
            self.metrics.delivery_seconds.observe(latency)
        topic = message.topic() or ""
        if error is None:
            self.count(topic, kind, size, 0 if kind == "schema" else batch.commit_ts, message)
            self.tracker.acknowledged(batch)
            return
        self.delivery_error(error, topic, kind)
        failure = Failure(
            batch.commit_ts,
            batch.table or self.topics.table_of(topic),
            topic,
            f"{error.name()}: {error.str()}",
            retriable=error.code() not in REFUSED,
        )
        self.tracker.failed(batch, failure)

    def delivery_error(self, error: KafkaError, topic: str, kind: str) -> None:
        self.metrics.delivery_errors.labels(error.name()).inc()
        if error.code() in _UNKNOWN_TOPIC:
            self.topics.admin.forget(topic)  # made again before the next message to it
        if error.fatal() or error.code() in _FENCED:
            self.fatal = error
        self.warn(
            f"delivery:{error.name()}",
            "kafka sink: a %s message to %s failed: %s: %s",
            kind,
            topic,
            error.name(),
            error.str(),
        )

    def count(self, topic: str, kind: str, size: int, ts: int, message: Message) -> None:
        """An acknowledged message: metrics (added up, see :meth:`_add_counts`), ``delivered``, and
        ``on_acknowledged(kind, ts, message)``."""
        tally = self._tally.get((topic, kind))
        if tally is None:
            tally = self._tally[(topic, kind)] = [0, 0]
        tally[0] += 1
        tally[1] += size
        self.delivered[kind] += 1
        if self.on_acknowledged is not None:
            self.on_acknowledged(kind, ts, message)

    def _add_counts(self) -> None:
        """The messages and bytes :meth:`count` added up, into their metrics: once per poll, not per
        message (two locked increments a message were a share of every row)."""
        for (topic, kind), tally in self._tally.items():
            if not tally[0]:
                continue
            counter = self._counted.get((topic, kind))
            if counter is None:
                counter = self._counted[(topic, kind)] = self.metrics.messages.labels(topic, kind)
                self._bytes[topic] = self.metrics.bytes.labels(topic)
            counter.inc(tally[0])
            self._bytes[topic].inc(tally[1])
            tally[0] = tally[1] = 0

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's error callback (queued by :meth:`later`)."""
        if error.fatal():
            self.fatal = error
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.warn(
                "brokers",
                "kafka sink: no broker of %s is reachable (%s); messages wait in the producer queue for up "
                "to delivery-timeout (%gs) and the checkpoint does not move",
                self.config.bootstrap_servers,
                error.str(),
                self.config.delivery_timeout,
            )
            return
        self.warn(f"error:{error.name()}", "kafka sink: %s: %s", error.name(), error.str())

    def _on_stats(self, stats_json: str) -> None:
        try:
            brokers = json.loads(stats_json).get("brokers", {}).values()
            retries = sum(int(b.get("txretries", 0)) for b in brokers)
            requests = sum(int(b.get("req", {}).get("Produce", 0)) for b in brokers)
        except (ValueError, TypeError, AttributeError):
            return
        if retries > self._retries_seen:
            self.metrics.producer_retries.inc(retries - self._retries_seen)
        self._retries_seen = retries
        if requests < self._requests_seen:  # a new producer counts from 0
            self._requests_seen = 0
        self.metrics.produce_requests.inc(requests - self._requests_seen)
        self._requests_seen = requests
