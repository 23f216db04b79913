"""Port slots: ``$BRIDGE_PORT_SLOT=k/n`` (tests/support/ports.py) becomes the demo's
``$BRIDGE_PORT_RANGE``, and ``free_port`` hands out only ports of it: parallel test workers
never share a port."""

from __future__ import annotations

import pytest

from bridge.apps.demo import cluster
from bridge.apps.demo.cluster import PORT_RANGE_ENV, free_port, port_range
from tests.support.ports import PORT_SLOT_ENV, install_port_slot, port_slot, slot_ports


def test_unset_is_one_slot_and_no_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SLOT_ENV, raising=False)
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    assert port_slot() == (0, 1)
    install_port_slot()
    assert port_range() is None


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_every_port_handed_out_is_of_the_slot(monkeypatch: pytest.MonkeyPatch, slot: int) -> None:
    monkeypatch.setenv(PORT_SLOT_ENV, f"{slot}/3")
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    monkeypatch.setattr(cluster, "_ports_handed_out", set())
    install_port_slot()
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    share = slot_ports(slot, 3)
    assert all(port in share and port % 2 == 0 for port in ports), (share, ports)
    others = [slot_ports(other, 3) for other in range(3) if other != slot]
    assert not any(set(share) & set(other) for other in others)


@pytest.mark.parametrize(
    ("text", "why"), [("1", "expected k/n"), ("a/2", "expected k/n"), ("2/2", "0 <= k < n")]
)
def test_a_malformed_slot_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str, why: str) -> None:
    monkeypatch.setenv(PORT_SLOT_ENV, text)
    with pytest.raises(ValueError, match=f"{PORT_SLOT_ENV}=.*{why}"):
        install_port_slot()


@pytest.mark.parametrize(("text", "why"), [("x", "expected low-high"), ("2000-1500", "low < high")])
def test_a_malformed_range_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str, why: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, text)
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}=.*{why}"):
        free_port()
