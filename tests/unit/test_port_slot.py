"""Port slots: ``$BRIDGE_PORT_SLOT=k/n`` (tests/support/ports.py) becomes the demo's
``$BRIDGE_PORT_RANGE``, and ``free_port`` hands out only ports of it: parallel test workers
never share a port, and the workers of one pytest-xdist run split their run's slot between them."""

from __future__ import annotations

import pytest

from bridge.apps.demo import cluster
from bridge.apps.demo.cluster import PORT_RANGE_ENV, free_port, port_range
from tests.support.ports import (
    PORT_SLOT_ENV,
    PORT_WORKER_ENV,
    ephemeral_ports,
    install_port_slot,
    port_slot,
    share_of,
    slot_ports,
)


@pytest.fixture(autouse=True)
def _no_worker_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests run in a worker of a parallel run too: start from a tree not yet split."""
    monkeypatch.delenv(PORT_WORKER_ENV, raising=False)


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


def installed(monkeypatch: pytest.MonkeyPatch, slot: str | None, worker: tuple[int, int] | None) -> range:
    """The ports a process tree under ``$BRIDGE_PORT_SLOT=slot`` and xdist ``worker`` hands out."""
    if slot is None:
        monkeypatch.delenv(PORT_SLOT_ENV, raising=False)
    else:
        monkeypatch.setenv(PORT_SLOT_ENV, slot)
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    monkeypatch.delenv(PORT_WORKER_ENV, raising=False)
    install_port_slot(worker)
    ports = port_range()
    assert ports is not None
    return range(ports.start, ports.stop)


@pytest.mark.parametrize("slot", [0, 3, 8])
def test_the_workers_of_a_slot_split_that_slot(monkeypatch: pytest.MonkeyPatch, slot: int) -> None:
    """Workers w of W under slot k/n: the w-th W-th of the k-th share, so two workers of one run
    never collide with each other nor with another run's slot (which used to override them)."""
    outer = slot_ports(slot, 9)
    workers = [installed(monkeypatch, f"{slot}/9", (worker, 2)) for worker in range(2)]
    for worker, ports in enumerate(workers):
        assert ports == share_of(outer, worker, 2)
        assert outer.start <= ports.start and ports.stop <= outer.stop, (outer, ports)
        assert len(ports) >= len(outer) // 2
    assert not set(workers[0]) & set(workers[1])
    for other in range(9):
        if other != slot:
            assert not any(set(ports) & set(slot_ports(other, 9)) for ports in workers)


def test_a_worker_hands_out_only_its_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "_ports_handed_out", set())
    ports = installed(monkeypatch, "4/9", (1, 2))
    handed = [free_port() for _ in range(20)]
    assert all(port in ports for port in handed), (ports, handed)


def test_workers_without_a_slot_split_the_whole_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    assert installed(monkeypatch, None, (1, 3)) == share_of(ephemeral_ports(), 1, 3)
    monkeypatch.delenv(PORT_RANGE_ENV)
    monkeypatch.delenv(PORT_WORKER_ENV)
    install_port_slot((0, 1))  # one worker: the kernel picks, as without xdist
    assert port_range() is None


def test_a_worker_splits_an_explicit_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SLOT_ENV, raising=False)
    monkeypatch.setenv(PORT_RANGE_ENV, "40000-40999")
    install_port_slot((1, 2))
    assert port_range() == range(40500, 41000, 2)


def test_the_processes_a_worker_starts_do_not_split_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started by a worker inherits its range and $BRIDGE_PORT_WORKER (and its
    PYTEST_XDIST_WORKER): were it to load tests/conftest.py again, its range stays the worker's."""
    first = installed(monkeypatch, "2/9", (1, 2))
    install_port_slot((1, 2))
    assert port_range() == range(first.start + first.start % 2, first.stop, 2)
