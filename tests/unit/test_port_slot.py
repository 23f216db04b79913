"""``free_port`` under ``$BRIDGE_PORT_SLOT``: parallel test workers never share a port."""

from __future__ import annotations

import pytest

from bridge.apps.demo import cluster
from bridge.apps.demo.cluster import PORT_SLOT_ENV, free_port, port_slot


def test_unset_is_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SLOT_ENV, raising=False)
    assert port_slot() == (0, 1)


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_every_port_handed_out_is_of_the_slot(monkeypatch: pytest.MonkeyPatch, slot: int) -> None:
    monkeypatch.setenv(PORT_SLOT_ENV, f"{slot}/3")
    monkeypatch.setattr(cluster, "_ports_handed_out", set())
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    share = cluster._slot_ports(slot, 3)
    assert all(port in share for port in ports), (share, ports)
    others = [cluster._slot_ports(other, 3) for other in range(3) if other != slot]
    assert not any(set(share) & set(other) for other in others)


@pytest.mark.parametrize(
    ("text", "why"), [("1", "expected k/n"), ("a/2", "expected k/n"), ("2/2", "0 <= k < n")]
)
def test_a_malformed_slot_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str, why: str) -> None:
    monkeypatch.setenv(PORT_SLOT_ENV, text)
    with pytest.raises(ValueError, match=f"{PORT_SLOT_ENV}=.*{why}"):
        free_port()
