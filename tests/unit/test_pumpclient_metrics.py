"""The SDK's lock-free write-duration histogram exposes what a prometheus_client Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bridge.pumpclient.metrics import WRITE_SECONDS, DurationHistogram

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
VALUES = (0.0001, 0.0005, 0.0007, 0.001, 0.01, 0.3, 30.0, 31.0, 0.002)


def samples(registry: CollectorRegistry, name: str) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return sorted(line for line in lines if line.startswith(name) and "_created" not in line)


def test_exposition_equals_a_prometheus_histogram() -> None:
    registry = CollectorRegistry()
    reference = Histogram("ref_seconds", "doc", ["type"], buckets=BUCKETS, registry=registry)
    ours = DurationHistogram("ours_seconds", "doc", "type", BUCKETS, registry=registry)
    for kind in ("prewrite", "commit"):
        for value in VALUES[: 5 if kind == "commit" else None]:
            reference.labels(kind).observe(value)
            ours.labels(kind).observe(value)
    expected = [line.replace("ref_seconds", "ours_seconds") for line in samples(registry, "ref_seconds")]
    assert samples(registry, "ours_seconds") == expected
    assert 'ours_seconds_count{type="prewrite"} 9.0' in expected


def test_the_client_histogram_is_registered_in_the_default_registry() -> None:
    from prometheus_client import REGISTRY

    before = REGISTRY.get_sample_value("bridge_pump_client_write_seconds_count", {"type": "rollback"}) or 0.0
    WRITE_SECONDS.labels("rollback").observe(0.003)
    after = REGISTRY.get_sample_value("bridge_pump_client_write_seconds_count", {"type": "rollback"})
    assert after == before + 1
