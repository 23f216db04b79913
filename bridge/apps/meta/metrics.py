"""Prometheus metrics of a meta member, read from its state at scrape time.

==========================================  =======  ==========================================
name                                        type     meaning
==========================================  =======  ==========================================
bridge_meta_timestamps_allocated_total      counter  timestamps this member handed out
bridge_meta_is_leader                       gauge    1 while this member leads
bridge_meta_tso_limit_ms                    gauge    the saved TSO window limit (physical ms)
bridge_meta_registry_nodes                  gauge    registered nodes by kind, state and alive
==========================================  =======  ==========================================
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from bridge.apps.meta.member import MetaMember
from bridge.meta.nodes import KIND_NAMES, STATE_NAMES


class MemberCollector(Collector):
    """Reads a :class:`MetaMember` on every scrape; no state of its own."""

    def __init__(self, member: MetaMember) -> None:
        self._member = member

    def collect(self) -> Iterable[Metric]:
        member = self._member
        allocated = CounterMetricFamily(
            "bridge_meta_timestamps_allocated", "Timestamps this member handed out", labels=["member"]
        )
        allocated.add_metric([member.member_id], member.oracle.allocated)
        yield allocated
        yield GaugeMetricFamily(
            "bridge_meta_is_leader", "1 while this member leads", value=int(member.is_leader)
        )
        yield GaugeMetricFamily(
            "bridge_meta_tso_limit_ms", "Saved TSO window limit, physical ms", value=member.oracle.limit
        )
        nodes = GaugeMetricFamily(
            "bridge_meta_registry_nodes", "Registered nodes", labels=["kind", "state", "alive"]
        )
        counts = Counter((kind, state, str(alive).lower()) for _, kind, state, alive in node_labels(member))
        for labels, count in sorted(counts.items()):
            nodes.add_metric(list(labels), count)
        yield nodes


def node_labels(member: MetaMember) -> list[tuple[str, str, str, bool]]:
    """``(node_id, kind, state, alive)`` of every registered node, kind and state by name
    (empty on a follower); what the metrics count and ``/status`` lists."""
    return [
        (n.node_id, KIND_NAMES.get(n.kind, "unknown"), STATE_NAMES.get(n.state, "unknown"), n.is_alive)
        for n in member.registry.snapshot()
    ]


def member_registry(member: MetaMember) -> CollectorRegistry:
    """A registry holding only this member's metrics (several members may share a process)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(MemberCollector(member))
    return registry
