"""Port slots for parallel test runs: ``$BRIDGE_PORT_SLOT=k/n`` gives this process tree the k-th
of n shares of the kernel's ephemeral port range, so n trees on one host (pytest-xdist workers,
several people's runs) never pick the same port; the workers of a pytest-xdist run split their
run's share between them (``install_port_slot``).

:func:`install_port_slot` (tests/conftest.py calls it) turns the slot into the demo's
``$BRIDGE_PORT_RANGE``, which :func:`bridge.apps.demo.cluster.free_port` and every process the
tests start (inheriting the environment) pick from; :func:`free_port` is that one allocator.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bridge.apps.demo.cluster import PORT_RANGE_ENV, free_port, port_range

__all__ = [
    "PORT_SLOT_ENV",
    "PORT_WORKER_ENV",
    "free_port",
    "install_port_slot",
    "port_slot",
    "share_of",
    "slot_ports",
]

PORT_SLOT_ENV = "BRIDGE_PORT_SLOT"
# "w/W" once a pytest-xdist worker has split its slot's ports (install_port_slot): the processes
# it starts inherit the split range and this marker, and do not split it again
PORT_WORKER_ENV = "BRIDGE_PORT_WORKER"
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


def share_of(ports: range, part: int, parts: int) -> range:
    """The ``part``-th of ``parts`` equal, contiguous shares of ``ports`` (a step-1 range)."""
    if not 0 <= part < parts:
        raise ValueError(f"share {part} of {parts}: expected 0 <= share < shares")
    size = len(ports) // parts
    start = ports.start + part * size
    return range(start, start + size)


def ephemeral_ports() -> range:
    """The kernel's ephemeral port range (where bind to port 0 picks)."""
    low, high = 32768, 60999
    with contextlib.suppress(OSError, ValueError):
        low, high = map(int, Path(EPHEMERAL_RANGE).read_text().split())
    return range(low, high + 1)


def slot_ports(slot: int, slots: int) -> range:
    """This slot's share of the kernel's ephemeral port range (where bind to port 0 picks)."""
    return share_of(ephemeral_ports(), slot, slots)


def install_port_slot(worker: tuple[int, int] | None = None) -> None:
    """Set ``$BRIDGE_PORT_RANGE`` to this process tree's ports: an explicit ``$BRIDGE_PORT_RANGE``
    stays; else, under a slot k/n of n > 1, the slot's share of the ephemeral range. For
    pytest-xdist worker w of W (``worker``, W > 1), the w-th W-th of those ports (of the whole
    ephemeral range without either): the workers of one run share out its slot and never reach
    into another run's slot. The split is made once per process tree (``$BRIDGE_PORT_WORKER``)."""
    slot, slots = port_slot()
    explicit = port_range()
    if explicit is not None:
        ports: range | None = range(explicit.start, explicit.stop)
    elif slots > 1:
        ports = slot_ports(slot, slots)
    else:
        ports = None
    if worker is not None and worker[1] > 1:
        split = f"{worker[0]}/{worker[1]}"
        if os.environ.get(PORT_WORKER_ENV) != split:
            ports = share_of(ports if ports is not None else ephemeral_ports(), *worker)
            os.environ[PORT_WORKER_ENV] = split
    if ports is not None:
        os.environ[PORT_RANGE_ENV] = f"{ports.start}-{ports.stop - 1}"
