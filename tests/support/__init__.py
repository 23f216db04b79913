"""Helpers the tests share: child processes, free ports, waiting on conditions."""
