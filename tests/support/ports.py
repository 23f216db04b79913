"""Port slots for parallel test runs: ``$BRIDGE_PORT_SLOT=k/n`` gives this process tree the k-th
of n shares of the kernel's ephemeral port range, so n trees on one host (pytest-xdist workers,
several people's runs) never pick the same port.

:func:`install_port_slot` (tests/conftest.py calls it) turns the slot into the demo's
``$BRIDGE_PORT_RANGE``, which :func:`bridge.apps.demo.cluster.free_port` and every process the
tests start (inheriting the environment) pick from; :func:`free_port` is that one allocator.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bridge.apps.demo.cluster import PORT_RANGE_ENV, free_port

__all__ = ["PORT_SLOT_ENV", "free_port", "install_port_slot", "port_slot", "slot_ports"]

PORT_SLOT_ENV = "BRIDGE_PORT_SLOT"
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def port_slot() -> tuple[int, int]:
    """``$BRIDGE_PORT_SLOT`` as (slot, slots); unset: (0, 1)."""
    text = os.environ.get(PORT_SLOT_ENV, "").strip()
    if not text:
        return 0, 1
    slot, _, slots = text.partition("/")
    try:
        k, n = int(slot), int(slots)
    except ValueError:
        raise ValueError(f"{PORT_SLOT_ENV}={text!r}: expected k/n, e.g. 0/2") from None
    if not 0 <= k < n:
        raise ValueError(f"{PORT_SLOT_ENV}={text!r}: expected 0 <= k < n")
    return k, n


def slot_ports(slot: int, slots: int) -> range:
    """This slot's share of the kernel's ephemeral port range (where bind to port 0 picks)."""
    low, high = 32768, 60999
    with contextlib.suppress(OSError, ValueError):
        low, high = map(int, Path(EPHEMERAL_RANGE).read_text().split())
    share = (high - low + 1) // slots
    start = low + slot * share
    return range(start, start + share)


def install_port_slot() -> None:
    """Under a slot of n > 1, set ``$BRIDGE_PORT_RANGE`` to this slot's share (unless set)."""
    slot, slots = port_slot()
    if slots > 1:
        ports = slot_ports(slot, slots)
        os.environ.setdefault(PORT_RANGE_ENV, f"{ports.start}-{ports.stop - 1}")
