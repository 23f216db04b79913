"""Turning SIGINT, SIGTERM and SIGHUP into :class:`~bridge.apps.demo.errors.Interrupted`, and
holding them off while the demo cleans up.

While :func:`interruptible` is active, the first of these signals raises
``Interrupted`` in the main thread wherever it is (waiting for a child, in
the diff), so the ``finally`` blocks that stop the children run. Inside
:func:`deferred`, used around that cleanup, a signal is only noted: a second
Ctrl-C must not cut the stopping short and leave children behind.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from bridge.apps.demo.errors import Interrupted
from bridge.startup import signal_handlers

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _note(signum: int, _frame: FrameType | None) -> None:
    log.warning("%s received while stopping; still stopping the children", signal.Signals(signum).name)


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` inside this block (main thread only)."""
    with signal_handlers(_raise, SIGNALS):
        yield


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP are logged and otherwise ignored inside this block."""
    with signal_handlers(_note, SIGNALS):
        yield
