"""The pump client SDK: how producers write binlogs to the pump cluster.

- :class:`AsyncPumpsClient` — asyncio; coalesces concurrent binlogs into
  batched ``WriteBinlogs`` calls.
- :class:`PumpsClient` — the same client behind a blocking, thread-safe API.
- :class:`PumpClientConfig` — strategy, timeouts, retries, probing, batching.

Errors come from :mod:`bridge.errors`: ``NoPumpAvailable`` when no pump took a
Prewrite within ``write-timeout``, ``PumpRejected`` when a pump refused a
binlog, ``MetaError`` when the client cannot start. See docs/pump-client.md.
"""

from bridge.errors import NoPumpAvailable, PumpError, PumpRejected, PumpUnavailable
from bridge.pumpclient.client import AsyncPumpsClient
from bridge.pumpclient.config import PumpClientConfig
from bridge.pumpclient.selector import PumpWeight, Selector, make_selector
from bridge.pumpclient.sync import PumpsClient

__all__ = [
    "AsyncPumpsClient",
    "NoPumpAvailable",
    "PumpClientConfig",
    "PumpError",
    "PumpRejected",
    "PumpUnavailable",
    "PumpWeight",
    "PumpsClient",
    "Selector",
    "make_selector",
]
