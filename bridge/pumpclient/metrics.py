"""Prometheus metrics of the pump client (the process-wide default registry)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from functools import cache

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString


class Durations:
    """One histogram child's observations: a bucket count and the sum, no lock.

    :meth:`observe` runs for every binlog on the client's event loop (one
    thread); ``Histogram.observe`` takes a lock and walks the buckets in
    Python, ~1-2 us a binlog. A scrape from another thread reads a copy of the
    counts (a list copy is atomic under the GIL); the sum may then be one
    observation apart from the counts, never the buckets from each other.
    """

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self._bounds, seconds)] += 1
        self.sum += seconds


class DurationHistogram(Collector):
    """A histogram with one label, exposed like ``prometheus_client.Histogram``
    (cumulative ``le`` buckets, ``_count``, ``_sum``), fed by :class:`Durations`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        buckets: Sequence[float],
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._name, self._documentation, self._label = name, documentation, label
        self._bounds = tuple(sorted(buckets))
        les = (*self._bounds, float("inf"))
        self._les = [floatToGoString(bound) for bound in les]  # type: ignore[no-untyped-call]
        self._children: dict[str, Durations] = {}
        registry.register(self)

    def labels(self, value: str) -> Durations:
        child = self._children.get(value)
        if child is None:
            child = self._children.setdefault(value, Durations(self._bounds))
        return child

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=[self._label])]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=[self._label])
        for value, child in list(self._children.items()):
            counts, total = list(child.counts), child.sum
            buckets, cumulative = [], 0
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric([value], buckets, total)
        yield family


WRITE_SECONDS = DurationHistogram(
    "bridge_pump_client_write_seconds",
    "Time one write_binlog call took, retries included",
    "type",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

WRITES = Counter(
    "bridge_pump_client_writes_total",
    "Binlogs sent to pumps, by pump, binlog type and result (ok, failed, rejected)",
    ["pump", "type", "result"],
)
BATCH_SIZE = Histogram(
    "bridge_pump_client_batch_size",
    "Binlogs per WriteBinlogs call",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
)
TSO_CALLS = Counter(
    "bridge_pump_client_tso_calls_total",
    "GetTimestamps calls to the meta service (concurrent asks share one)",
)
AVAILABLE_PUMPS = Gauge(
    "bridge_pump_client_available_pumps",
    "Pumps in the available list (online, alive in the registry, not failing)",
)
COMMIT_UNSENT = Counter(
    "bridge_pump_client_commit_unsent_total",
    "Commit/Rollback binlogs that no attempt delivered within write-timeout; "
    "the Prewrite's pump resolves them after max_txn_timeout",
)


# Label lookups cost microseconds on a path that runs per binlog: cache the children.
@cache
def write_seconds(kind: str) -> Durations:
    return WRITE_SECONDS.labels(kind)


@cache
def writes(pump: str, kind: str, result: str) -> Counter:
    return WRITES.labels(pump=pump, type=kind, result=result)


CHUNKED_TXNS = Counter(
    "bridge_pump_client_chunked_txns_total",
    "DML Prewrites larger than chunk-bytes that a pump took as PrewriteChunk parts and a final Prewrite",
)
CHUNK_PARTS = Counter(
    "bridge_pump_client_chunk_parts_total",
    "PrewriteChunk binlogs a pump took (a transaction retried on another pump counts its parts again)",
)
CHUNKED_RESTARTS = Counter(
    "bridge_pump_client_chunked_restarts_total",
    "Chunked transactions started again from part 1 on another pump after a pump failed part-way",
)
