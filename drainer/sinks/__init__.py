"""Sinks: where the drainer's ordered change stream goes. One module per sink,
all behind :class:`drainer.sinks.base.Sink`; built from config by name."""
