"""How a command starts and stops: its logging, the signals that stop it, and running until stopped.

Every ``binlog-bridge`` command goes through here, whichever package it lives
in (``bridge.cli``, or ``pump``/``drainer`` commands registered by entry point):

- :func:`configure_logging` — one format on stderr, the level of ``--log-level``;
- :func:`run_until_stopped` — a long-running asyncio service (meta, pump,
  drainer): ``serve(stop)`` runs until SIGTERM or SIGINT sets ``stop``, then
  returns after its own clean shutdown;
- :func:`stop_on_signals` — the same stop for a synchronous command (load,
  consume): a :class:`threading.Event` set by SIGTERM or SIGINT while the
  block runs;
- :func:`signal_handlers` — the primitive under it: handlers installed for a
  block and the previous ones restored after it (the demo uses it to turn
  signals into an exception).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LOG_LEVELS = ("debug", "info", "warning", "error")

SignalHandler = Callable[[int, FrameType | None], None]


def configure_logging(level: str) -> None:
    """Log records at ``level`` (one of :data:`LOG_LEVELS`) and above to stderr, in :data:`LOG_FORMAT`."""
    logging.basicConfig(level=getattr(logging, level.upper()), format=LOG_FORMAT)


def run_until_stopped(serve: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run ``serve(stop)`` on a new event loop; SIGTERM or SIGINT sets ``stop``. Exit status 0.

    ``serve`` is expected to return once ``stop`` is set and it has shut down;
    its exceptions propagate (the CLI turns them into an exit status).
    """
    asyncio.run(_serve(serve))
    return 0


async def _serve(serve: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop_soon(signum: int) -> None:
        log.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    # remove_signal_handler resets to the default, not to what was there: put the previous back.
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop_soon, signum)
    try:
        await serve(stop)
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            if handler is not None:  # None: a handler not set from Python, nothing to put back
                signal.signal(signum, handler)


@contextmanager
def signal_handlers(
    handler: SignalHandler, signals: Sequence[signal.Signals] = STOP_SIGNALS
) -> Iterator[None]:
    """``handler`` for ``signals`` inside the block; the previous handlers are restored after it.

    Signal handlers can only be set from the main thread: elsewhere the block
    runs with the handlers unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def stop_on_signals(what: str) -> Iterator[threading.Event]:
    """An event that SIGTERM or SIGINT sets while the block runs; ``what`` names the command in the log."""
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: %s received: stopping", what, signal.Signals(signum).name)
        stop.set()

    with signal_handlers(handler):
        yield stop
