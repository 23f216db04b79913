"""binlog bridge: what every component and every producer shares."""

__version__ = "0.1.0"
