"""The meta service (the PD role): timestamp oracle and node registry.

Clients use :class:`MetaClient`; ``binlog-bridge meta`` runs
:class:`bridge.meta.server.MetaServer`. See docs/meta-service.md.
"""

from bridge.meta.client import MetaClient

__all__ = ["MetaClient"]
