"""The drainer's HTTP endpoint.

=====================  =====================================================
``GET /status``        JSON: the node, the checkpoint (ts, time, lag
                       seconds), the merge (resolved ts, each pump's
                       position, stream state, buffer), the sink (flushed
                       position, queue, retries), the error that stopped
                       replication, if one did
``GET /metrics``       Prometheus text format (every ``bridge_*`` metric)
``POST /state/close``  take the drainer out of the cluster for good: it
                       stops cleanly and registers OFFLINE, so closing pumps
                       stop waiting for it (``binlog-bridge ctl close ID``)
=====================  =====================================================

``POST /state/pause`` and ``/state/resume`` answer 409: a drainer is
stopped (SIGTERM), not paused.

The server, its limits, error answers and TLS are the shared
:mod:`bridge.status_http`, as for the pump's endpoint (:mod:`pump.http`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from http import HTTPStatus

from bridge import status_http
from bridge.errors import UserError
from bridge.status_http import Response
from drainer import metrics

REFUSE_PAUSE = "a drainer is not paused: stop it (SIGTERM) and start it again, or close it for good"


async def _refuse_pause() -> Response:
    raise UserError(REFUSE_PAUSE)


class StatusServer(status_http.StatusServer):
    """The drainer's endpoint. ``before_metrics`` refreshes gauges computed on
    demand (pump positions, lag); ``close`` begins a close and returns the status."""

    def __init__(
        self,
        status: Callable[[], Mapping[str, object]],
        before_metrics: Callable[[], None],
        close: Callable[[], Mapping[str, object]],
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        async def close_for_good() -> Response:
            return Response.json(HTTPStatus.OK, close())

        super().__init__(
            "drainer",
            status,
            host,
            port,
            routes={
                "/state/close": {"POST": close_for_good},
                "/state/pause": {"POST": _refuse_pause},
                "/state/resume": {"POST": _refuse_pause},
            },
            before_metrics=before_metrics,
            on_error=metrics.ERRORS.labels("http").inc,
            ssl_context=ssl_context,
        )
