"""The meta server (the PD role): timestamp oracle, node registry and their store backends.

``binlog-bridge meta`` runs :class:`bridge.apps.meta.server.MetaServer`. The
client every pump, drainer, producer and ``ctl`` uses is the kernel's
:mod:`bridge.meta`. See docs/meta-service.md.
"""
