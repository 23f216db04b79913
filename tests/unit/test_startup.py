"""bridge.startup: the stop signals of a command, installed for a block and restored after it.

Signals are sent to this process with os.kill; nothing is timed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading

from bridge.startup import run_until_stopped, signal_handlers, stop_on_signals


def test_sigterm_sets_the_stop_event_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals("test") as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(10)
    assert signal.getsignal(signal.SIGTERM) is before


def test_handlers_are_left_alone_off_the_main_thread() -> None:
    seen: list[object] = []

    def body() -> None:
        with signal_handlers(lambda *_: None):
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_run_until_stopped_returns_after_the_service_shut_down_on_sigint() -> None:
    steps: list[str] = []

    async def serve(stop: asyncio.Event) -> None:
        steps.append("ready")
        os.kill(os.getpid(), signal.SIGINT)
        await stop.wait()
        steps.append("stopped cleanly")

    before = signal.getsignal(signal.SIGINT)
    assert run_until_stopped(serve) == 0
    assert steps == ["ready", "stopped cleanly"]
    assert signal.getsignal(signal.SIGINT) is before


def test_run_until_stopped_puts_back_a_handler_someone_else_installed() -> None:
    """A SparkContext (or any library) may own SIGINT before a service runs in the same process."""

    def theirs(signum: int, frame: object) -> None:
        pass

    async def serve(stop: asyncio.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()

    previous = signal.signal(signal.SIGINT, theirs)
    try:
        assert run_until_stopped(serve) == 0
        assert signal.getsignal(signal.SIGINT) is theirs
    finally:
        signal.signal(signal.SIGINT, previous)
