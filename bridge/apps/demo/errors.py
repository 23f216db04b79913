"""The demo's exceptions.

::

    DemoError (bridge.errors.BridgeError)
    ├── ServiceFailed        a child process exited, or never printed its ready line
    ├── CatchUpTimeout       the drainer did not reach the producers' last commit in time
    └── Interrupted          SIGINT / SIGTERM / SIGHUP asked the demo to stop
    DataDirInUse (bridge.errors.UserError)   --data-dir is not empty
"""

from __future__ import annotations

import signal
from pathlib import Path

from bridge.errors import BridgeError, UserError


class DemoError(BridgeError):
    """The demo could not run its cluster or its workload to the end.

    ``data_dir`` names where the run's configs, data and logs were kept, once known.
    """

    data_dir: Path | None = None


class ServiceFailed(DemoError):
    """A child process (meta, pump, drainer, load) exited or did not become ready.

    The message names the process, its exit status and the tail of its log.
    """


class CatchUpTimeout(DemoError):
    """The drainer's checkpoint did not reach the target commit_ts within the timeout."""


class Interrupted(DemoError):
    """A signal asked the demo to stop; everything it started is stopped."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name}")


class DataDirInUse(UserError):
    """The data dir given already holds files; the demo starts from an empty one."""
