"""Sinks: where the drainer's ordered change stream goes. One module per sink,
all behind :class:`bridge.sink.contract.Sink`; built from config by name."""
