"""The meta service's client (the PD role: timestamp oracle and node registry).

Pumps, drainers, producers and ``ctl`` use :class:`MetaClient` and the node
names of :mod:`bridge.meta.nodes`; the server that ``binlog-bridge meta`` runs
is the application :mod:`bridge.apps.meta`. See docs/meta-service.md.
"""

from bridge.meta.client import MetaClient

__all__ = ["MetaClient"]
