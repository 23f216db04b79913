"""The switch that proves the network fault tests need their heal step.

``BRIDGE_FAULT_SKIP_HEAL=1`` makes :meth:`tests.support.tcp_proxy.TcpProxy.heal` do nothing
and a reset storm (:func:`storm`) never end, so each scenario of tests/e2e/test_network_faults*.py
runs with its fault left in place; each must then fail (docs/operations.md records how). Unset,
as in CI, the tests run as written.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

SKIP_HEAL_ENV = "BRIDGE_FAULT_SKIP_HEAL"


def skip_heal() -> bool:
    return os.environ.get(SKIP_HEAL_ENV, "").strip() not in ("", "0")


def storm(reset: Callable[[], int], seconds: float, every: float, counts: list[int]) -> None:
    """Call ``reset`` (e.g. ``proxy.reset_all``) every ``every`` seconds for ``seconds``,
    appending what it returns to ``counts``. Under the switch the storm goes on in a
    background thread for the rest of the test instead of stopping."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        counts.append(reset())
        time.sleep(every)
    if skip_heal():

        def forever() -> None:
            while True:
                counts.append(reset())
                time.sleep(every)

        threading.Thread(target=forever, daemon=True, name="storm-without-heal").start()
